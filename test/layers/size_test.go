package layers

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLines is the most lines a hand-written Go file, tests included, may have: enough for one
// concern, few enough to read in one sitting.
const maxLines = 500

// TestFilesReadInOneSitting fails on a non-generated Go file (tests included) over maxLines lines, in
// both modules.
func TestFilesReadInOneSitting(t *testing.T) {
	root := "../.."
	sdkFiles := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".dev", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		if rel, _ := filepath.Rel(root, path); strings.HasPrefix(filepath.ToSlash(rel), "sdk/") {
			sdkFiles++
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("Code generated")) || strings.HasPrefix(filepath.Base(path), "zz_generated") {
			return nil
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s has %d lines (at most %d): split it along its seams", rel, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sdkFiles == 0 {
		t.Error("no Go file of sdk/ was checked: the walk must cover the data-plane module")
	}
}
