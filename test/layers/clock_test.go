package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// wallClock are the functions of package time that read the wall clock or wait on it. ARCHITECTURE.md:
// "every package that waits or stamps takes a k8s.io/utils/clock ... defaulting to the real clock".
var wallClock = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}

// clockAllowed are the files (from the repository root, both modules, a directory when it ends in
// /) that may call them, each with its reason.
var clockAllowed = map[string]string{
	"hack/": "the local tooling's programs: they print real durations and pace a live demo",
	// Certificates are checked against the wall clock by the servers and clients that read them.
	"internal/envtestutil/aggregation.go": "the front-proxy certificates' validity",
	"sdk/testutil/kafkatest/pki.go":       "the test certificate authority's validity",
	// The test sink answers late in real time: the engine's HTTP client times a request out on the
	// wall clock, as a real sink's slowness is.
	"sdk/dispatcher/dispatchertest/dispatchertest.go": "the test sink's answer delay",
}

// clockReported are the files that break the rule and are being fixed; remove each as its package
// takes a clock (empty: every package takes one).
var clockReported = map[string]string{}

// TestTheClockIsInjected fails on a non-test Go file that calls time.Now, time.Sleep and the like
// directly instead of through an injected k8s.io/utils/clock, outside clockAllowed.
func TestTheClockIsInjected(t *testing.T) {
	root := "../.."
	for _, v := range wallClockCalls(t, root) {
		t.Errorf("%s: calls time.%s: take a k8s.io/utils/clock (clock.RealClock{} by default) instead", v.pos, v.name)
	}
	// An exception no longer needed goes, so that the lists stay true.
	for _, m := range []map[string]string{clockAllowed, clockReported} {
		for rel := range m {
			if strings.HasSuffix(rel, "/") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("%s is excepted from the clock rule: %v", rel, err)
				continue
			}
			if len(wallClockUses(fset, f, rel)) == 0 {
				t.Errorf("%s is excepted from the clock rule but no longer reads the wall clock: remove it from the list", rel)
			}
		}
	}
}

type wallClockCall struct {
	pos  string // file:line from the module root
	name string
}

// wallClockCalls parses every non-test, non-generated Go file under root outside clockAllowed and
// returns its uses of the wallClock functions. The walk covers the data-plane module (sdk/) too.
func wallClockCalls(t *testing.T, root string) []wallClockCall {
	t.Helper()
	var out []wallClockCall
	sdkFiles := 0
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".dev", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || clockAllowedFile(rel) {
			return nil
		}
		if strings.HasPrefix(rel, "sdk/") {
			sdkFiles++
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		out = append(out, wallClockUses(fset, f, rel)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sdkFiles == 0 {
		t.Error("no Go file of sdk/ was checked: the walk must cover the data-plane module")
	}
	return out
}

// clockAllowedFile reports whether rel is in clockAllowed or clockReported, itself or under a
// directory ending in /.
func clockAllowedFile(rel string) bool {
	for _, m := range []map[string]string{clockAllowed, clockReported} {
		for p := range m {
			if rel == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)) {
				return true
			}
		}
	}
	return false
}

// wallClockUses returns the uses in f of the wallClock functions of package time, under whatever
// name the file imports it.
func wallClockUses(fset *token.FileSet, f *ast.File, rel string) []wallClockCall {
	var names []string
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != "time" {
			continue
		}
		switch {
		case imp.Name == nil:
			names = append(names, "time")
		case imp.Name.Name != "_":
			names = append(names, imp.Name.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	var out []wallClockCall
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && slices.Contains(names, x.Name) && slices.Contains(wallClock, sel.Sel.Name) {
			out = append(out, wallClockCall{pos: fmt.Sprintf("%s:%d", rel, fset.Position(sel.Pos()).Line), name: sel.Sel.Name})
		}
		return true
	})
	return out
}

// TestWallClockUsesAreFound: the check finds calls and function values under the import's own
// name, and nothing in a file that does not import time.
func TestWallClockUsesAreFound(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"direct calls", "package p\nimport \"time\"\nfunc f() { _ = time.Now(); time.Sleep(1) }\n", []string{"p.go:3 Now", "p.go:3 Sleep"}},
		{"a function value", "package p\nimport \"time\"\nvar now = time.Now\n", []string{"p.go:3 Now"}},
		{"a renamed import", "package p\nimport stdtime \"time\"\nvar c = stdtime.After(1)\n", []string{"p.go:3 After"}},
		{"durations and the clock package are fine", "package p\nimport (\"time\"; \"k8s.io/utils/clock\")\nvar d = time.Second\nvar c clock.Clock = clock.RealClock{}\nvar t = c.Now()\n", nil},
		{"another package's Now", "package p\nimport \"example.com/time2\"\nvar t = time2.Now()\n", nil},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "p.go", tc.src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, u := range wallClockUses(fset, f, "p.go") {
			got = append(got, u.pos+" "+u.name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: found %q, want %q", tc.name, got, tc.want)
		}
	}
}
