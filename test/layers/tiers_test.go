package layers

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// make test-unit runs, with -short, the packages hack/unit-packages.sh lists (their tests need no
// envtest and no browser); make test runs every package without -short. A test that consults
// testing.Short in a package outside that list is skipped nowhere: it reads as kept out of the quick
// loop while the quick loop never runs its package, or as an envtest or browser test skipped rather
// than left out by the list.

// TestShortIsConsultedOnlyInTheQuickTier fails when a test file of a package hack/unit-packages.sh
// leaves out calls testing.Short.
func TestShortIsConsultedOnlyInTheQuickTier(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(rootDir, "hack", "unit-packages.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{rootDir, sdkDir, examplesDir} {
		cmd := exec.Command(script)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s in %s: %v", script, dir, err)
		}
		quick := strings.Fields(string(out))
		if len(quick) == 0 {
			t.Fatalf("%s lists no package in %s", script, dir)
		}
		rows := goList(t, dir, "-f", `{{$d := .Dir}}{{range .TestGoFiles}}{{$.ImportPath}}|{{$d}}/{{.}} {{end}}{{range .XTestGoFiles}}{{$.ImportPath}}|{{$d}}/{{.}} {{end}}`, "./...")
		for _, row := range rows {
			pkg, file, _ := strings.Cut(row, "|")
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(src), "testing.Short()") && !slices.Contains(quick, pkg) {
				t.Errorf("%s calls testing.Short, but its package is not in make test-unit (hack/unit-packages.sh): leave a test out of the quick tier by its package's imports, not by -short", file)
			}
		}
	}
}
