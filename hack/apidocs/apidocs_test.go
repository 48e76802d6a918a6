package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const repo = "../.."

func crds(t *testing.T) []apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c, err := readCRDs(filepath.Join(repo, "config", "crd", "bases"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The committed reference is what the CRDs make of it (make verify checks the same through git).
func TestDocAPIReferenceIsCurrent(t *testing.T) {
	got, err := os.ReadFile(filepath.Join(repo, "docs", "api-reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != Render(crds(t)) {
		t.Fatal("docs/api-reference.md is stale: run `make manifests` (go run ./hack/apidocs) and commit it")
	}
}

// TestDocAPIReferenceCoversEveryField walks each CRD's schema on its own and expects, for every field
// of spec and status at any depth, a row in the table under its parent's heading, and every table
// linked from the row of the field that holds it.
func TestDocAPIReferenceCoversEveryField(t *testing.T) {
	c := crds(t)
	tables := parseTables(Render(c))
	fields := 0
	var walk func(heading string, s apiextensionsv1.JSONSchemaProps)
	walk = func(heading string, s apiextensionsv1.JSONSchemaProps) {
		rows, ok := tables[heading]
		if !ok {
			t.Errorf("no table %q", heading)
			return
		}
		for name, f := range s.Properties {
			fields++
			row, ok := rows[name]
			if !ok {
				t.Errorf("%s: no row for %q", heading, name)
				continue
			}
			if f.Description != "" && !strings.Contains(row, strings.Fields(f.Description)[0]) {
				t.Errorf("%s.%s: the row lacks the field's description: %s", heading, name, row)
			}
			if p, child, ok := nested(heading+"."+name, f); ok {
				if !strings.Contains(row, "(#"+anchor(p)+")") {
					t.Errorf("%s.%s: the row does not link %q: %s", heading, name, p, row)
				}
				walk(p, child)
			}
		}
	}
	for _, crd := range c {
		root := served(crd).Schema.OpenAPIV3Schema
		for _, sec := range sections {
			walk(crd.Spec.Names.Kind+"."+sec, root.Properties[sec])
		}
	}
	// The four kinds have well over a hundred fields: a walk that found few went wrong.
	if fields < 100 {
		t.Errorf("only %d fields walked", fields)
	}
	t.Logf("%d fields of %d kinds in %d tables", fields, len(c), len(tables))
}

var rowField = regexp.MustCompile("^\\| `([^`]+)`")

// parseTables reads the rendered reference back: per `### ` heading, each row by its field name.
func parseTables(md string) map[string]map[string]string {
	tables := map[string]map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(md, "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			cur = map[string]string{}
			tables[h] = cur
			continue
		}
		if strings.HasPrefix(line, "## ") {
			cur = nil
		}
		if m := rowField.FindStringSubmatch(line); m != nil && cur != nil {
			cur[m[1]] = line
		}
	}
	return tables
}

func TestDocAnchorFollowsGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"RetryPolicy.spec.backoff":                  "retrypolicyspecbackoff",
		"ConsumerPipeline.status.conditions[]":      "consumerpipelinestatusconditions",
		"Fan-out: several pipelines per source":     "fan-out-several-pipelines-per-source",
		"What the manager may do, `--watch-ns`_too": "what-the-manager-may-do---watch-ns_too",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
