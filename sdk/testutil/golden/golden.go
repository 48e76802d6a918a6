// Package golden compares a test's output with a file under testdata/, or rewrites the file when
// the tests run with -update. Standard library only, so every layer's tests may use it.
package golden

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// Assert compares got with testdata/<name>, or writes it there with -update; hint is the command
// that rewrites the package's golden files, shown when they differ.
func Assert(t testing.TB, name string, got []byte, hint string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (run %s -update to create it): %v", hint, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run %s -update and review the diff):\n%s", path, hint, Diff(want, got))
	}
}

// Diff shows the first 20 differing lines of want and got.
func Diff(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	var out bytes.Buffer
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			out.WriteString("line " + strconv.Itoa(i+1) + ":\n  want: " + strconv.Quote(string(wl)) + "\n  got:  " + strconv.Quote(string(gl)) + "\n")
			shown++
		}
	}
	return out.String()
}
