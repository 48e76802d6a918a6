package docs_test

import (
	"strings"
	"testing"
	"testing/fstest"
)

// TestDocLinkCheckFindsBrokenLinks runs the check on a made-up tree: each broken link is reported,
// and nothing else.
func TestDocLinkCheckFindsBrokenLinks(t *testing.T) {
	repo := fstest.MapFS{
		"README.md": {Data: []byte(strings.Join([]string{
			"# Title",
			"## Install with Helm",
			"## Install with Helm",
			"## `make dev`: the loop",
			"See [the concepts](docs/concepts.md), [helm](#install-with-helm) and [again](#install-with-helm-1),",
			"[the loop](#make-dev-the-loop), ![picture](docs/a.svg) and [the web](https://example.com/x.md#nope).",
			"Broken: [gone](docs/gone.md), [no anchor](#install-with-kustomize), [other](docs/concepts.md#nope).",
			"Not links: `[code](docs/gone.md)`,",
			"```yaml",
			"# a comment, not a heading",
			"[in a block](docs/gone.md)",
			"```",
		}, "\n"))},
		"docs/concepts.md": {Data: []byte("# Concepts\n<a id=\"pinned\"></a>\n[up](../README.md#title), [pinned](#pinned), [no comment](#a-comment-not-a-heading), [outside](../../etc/passwd)\n")},
		"docs/a.svg":       {Data: []byte("<svg/>")},
	}
	problems, links := check(repo, []string{"README.md", "docs/concepts.md"})
	want := []string{
		"README.md:7: [gone](docs/gone.md): no file docs/gone.md",
		"README.md:7: [no anchor](#install-with-kustomize): no heading #install-with-kustomize in README.md",
		"README.md:7: [other](docs/concepts.md#nope): no heading #nope in docs/concepts.md",
		"docs/concepts.md:3: [no comment](#a-comment-not-a-heading): no heading #a-comment-not-a-heading in docs/concepts.md",
		"docs/concepts.md:3: [outside](../../etc/passwd): leaves the repository",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if links != 12 {
		t.Errorf("%d links checked, want 12", links)
	}
}

func TestDocSlugFollowsGitHub(t *testing.T) {
	for h, want := range map[string]string{
		"Fan-out: several pipelines per source":                                      "fan-out-several-pipelines-per-source",
		"What the manager may do, what it keeps in memory, and `--watch-namespaces`": "what-the-manager-may-do-what-it-keeps-in-memory-and---watch-namespaces",
		"Autoscaled pipelines: `ignoreDifferences` on `/spec/replicas`":              "autoscaled-pipelines-ignoredifferences-on-specreplicas",
		"Reading dead letters: `kubectl get deadletters`":                            "reading-dead-letters-kubectl-get-deadletters",
		"RetryPolicy.spec.classification.rules[]":                                    "retrypolicyspecclassificationrules",
		"See [the chart](charts/x.md)":                                               "see-the-chart",
	} {
		if got := slug(h); got != want {
			t.Errorf("slug(%q) = %q, want %q", h, got, want)
		}
	}
}
