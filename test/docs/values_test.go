package docs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDocValuesExist: every chart value the README's table of values names, and every `--set name=`
// of the documentation, is a value of charts/retry-operator/values.yaml (whose schema refuses any
// other), so that a reader who sets it gets an install, not a schema error.
func TestDocValuesExist(t *testing.T) {
	b, err := os.ReadFile("../../charts/retry-operator/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, found := strings.Cut(string(readme), "The values a platform team sets most")
	if !found {
		t.Fatal("README.md has no table of values")
	}
	table, _, _ = strings.Cut(table, "\n\n\n")
	var names []string
	for _, row := range regexp.MustCompile("(?m)^\\| (`[^|]+) \\|").FindAllStringSubmatch(table, -1) {
		for _, n := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(row[1], -1) {
			names = append(names, strings.TrimSuffix(n[1], ".*"))
		}
	}
	files, err := markdownFiles(os.DirFS("../.."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		md, err := os.ReadFile("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`--set(?:-string|-json)?[ =]([A-Za-z][A-Za-z0-9.]*)=`).FindAllStringSubmatch(string(md), -1) {
			names = append(names, m[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d values found in the documentation: %v", len(names), names)
	}
	for _, n := range names {
		if !hasPath(values, n) {
			t.Errorf("the documentation names the chart value %s, which values.yaml does not have", n)
		}
	}
}

// hasPath reports whether the dotted path names a value (null included) of values.
func hasPath(values map[string]any, p string) bool {
	parts := strings.Split(p, ".")
	m := values
	for i, part := range parts {
		v, ok := m[part]
		if !ok {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return true
}
