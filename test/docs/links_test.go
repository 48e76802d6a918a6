// Package docs_test checks that the documentation's links resolve: every relative link or image of
// README.md, CHANGELOG.md, docs/**/*.md and charts/**/README.md names a file that exists, and every #anchor a
// heading of its file under GitHub's rules. External links (http, https, mailto) are not fetched.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve is the check on the repository itself.
func TestDocLinksResolve(t *testing.T) {
	repo := os.DirFS("../..")
	files, err := markdownFiles(repo)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("only %d Markdown files found: %v", len(files), files)
	}
	problems, links := check(repo, files)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d relative links and anchors in %d files", links, len(files))
}

// markdownFiles are the files the check reads.
func markdownFiles(repo fs.FS) ([]string, error) {
	files := []string{"README.md", "CHANGELOG.md"}
	for _, root := range []string{"docs", "charts"} {
		err := fs.WalkDir(repo, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
				return err
			}
			if root == "docs" || path.Base(p) == "README.md" {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

var (
	// link is an inline link or image, [text](target) or ![alt](target "title"); the text may
	// hold one level of brackets (a badge, an image in a link).
	link     = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	htmlID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	heading  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	fence    = regexp.MustCompile("^ {0,3}(```|~~~)")
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	external = regexp.MustCompile(`^(?i)(https?:|mailto:)`)
)

// check returns a sentence per broken link of files, and how many links it checked.
func check(repo fs.FS, files []string) (problems []string, links int) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		b, err := fs.ReadFile(repo, file)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[file] = a
		return a, nil
	}
	for _, file := range files {
		b, err := fs.ReadFile(repo, file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for n, line := range prose(string(b)) {
			if line == "" {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if target == "" || external.MatchString(target) {
					continue
				}
				links++
				where := fmt.Sprintf("%s:%d: %s", file, n+1, m[0])
				p, frag, _ := strings.Cut(target, "#")
				dest := file
				if p != "" {
					dest = path.Join(path.Dir(file), p)
					if strings.HasPrefix(dest, "../") || strings.HasPrefix(p, "/") {
						problems = append(problems, where+": leaves the repository")
						continue
					}
					if _, err := fs.Stat(repo, dest); err != nil {
						problems = append(problems, where+": no file "+dest)
						continue
					}
				}
				if frag == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					problems = append(problems, where+": "+err.Error())
				} else if !a[frag] {
					problems = append(problems, fmt.Sprintf("%s: no heading #%s in %s", where, frag, dest))
				}
			}
		}
	}
	return problems, links
}

// prose is the file's lines with those of fenced code blocks blanked, so that neither a link nor a
// heading is read inside one (a YAML comment starts with #).
func prose(md string) []string {
	lines := strings.Split(md, "\n")
	in := ""
	for i, l := range lines {
		m := fence.FindStringSubmatch(l)
		switch {
		case in == "" && m != nil:
			in, lines[i] = m[1], ""
		case in != "":
			if m != nil && m[1] == in {
				in = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors are the anchors GitHub gives the file's headings (repeats get -1, -2, ...) and
// its explicit <a id> or <a name> anchors.
func headingAnchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range prose(md) {
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := slug(m[2])
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading's text: the text as rendered (a link's text, no markup),
// lower case, letters, digits, '-' and '_' kept, spaces to '-', every other character dropped.
func slug(h string) string {
	h = inlineLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
