package docs_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoURL is where the release tags and their pages are.
const repoURL = "https://github.com/retryops/retry-operator"

var (
	releaseHeading = regexp.MustCompile(`^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})$`)
	linkReference  = regexp.MustCompile(`^\[([^\]]+)\]: (\S+)$`)
	changeSections = []string{"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
)

// changelogRelease is one "## [X.Y.Z] - date" of CHANGELOG.md.
type changelogRelease struct {
	version string
	semver  [3]int
	date    string
}

// readChangelog checks CHANGELOG.md's form (Keep a Changelog 1.1.0: a title, "## [Unreleased]",
// then the releases newest first, each with a date, sections among changeSections, and a link
// reference per heading) and returns its releases, newest first.
func readChangelog(t *testing.T) []changelogRelease {
	t.Helper()
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if lines[0] != "# Changelog" {
		t.Errorf("CHANGELOG.md starts with %q, want # Changelog", lines[0])
	}
	var releases []changelogRelease
	unreleased := false
	links := map[string]string{}
	for i, l := range lines {
		switch {
		case l == "## [Unreleased]":
			if unreleased || len(releases) > 0 {
				t.Errorf("CHANGELOG.md:%d: [Unreleased] must come once, before every release", i+1)
			}
			unreleased = true
		case strings.HasPrefix(l, "## "):
			m := releaseHeading.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("CHANGELOG.md:%d: %q is not \"## [X.Y.Z] - YYYY-MM-DD\"", i+1, l)
				continue
			}
			r := changelogRelease{version: m[1] + "." + m[2] + "." + m[3], date: m[4]}
			for j := range 3 {
				r.semver[j], _ = strconv.Atoi(m[1+j])
			}
			if n := len(releases); n > 0 && (slices.Compare(r.semver[:], releases[n-1].semver[:]) >= 0 || r.date > releases[n-1].date) {
				t.Errorf("CHANGELOG.md:%d: %s (%s) is not older than %s (%s) above it", i+1, r.version, r.date, releases[n-1].version, releases[n-1].date)
			}
			releases = append(releases, r)
		case strings.HasPrefix(l, "### "):
			if !slices.Contains(changeSections, strings.TrimPrefix(l, "### ")) {
				t.Errorf("CHANGELOG.md:%d: section %q is none of %v", i+1, l, changeSections)
			}
		case linkReference.MatchString(l):
			m := linkReference.FindStringSubmatch(l)
			links[m[1]] = m[2]
		}
	}
	if !unreleased {
		t.Error("CHANGELOG.md has no ## [Unreleased]")
	}
	if len(releases) == 0 {
		t.Fatal("CHANGELOG.md has no release")
	}
	want := map[string]string{"Unreleased": repoURL + "/compare/v" + releases[0].version + "...HEAD"}
	for i, r := range releases {
		want[r.version] = repoURL + "/releases/tag/v" + r.version
		if i+1 < len(releases) {
			want[r.version] = repoURL + "/compare/v" + releases[i+1].version + "...v" + r.version
		}
	}
	for name, url := range want {
		if links[name] != url {
			t.Errorf("CHANGELOG.md: the link of [%s] is %q, want %q", name, links[name], url)
		}
	}
	return releases
}

// TestVersionsAgree: the latest release of CHANGELOG.md is the chart's version, the tag of both
// images by default (the chart's appVersion and config/manager's images) and the kubectl plugin's
// krew manifest's version, so that a release changes them together.
func TestVersionsAgree(t *testing.T) {
	latest := readChangelog(t)[0].version
	tag := "v" + latest

	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, "../../charts/retry-operator/Chart.yaml", &chart)
	if chart.Version != latest || chart.AppVersion != tag {
		t.Errorf("charts/retry-operator/Chart.yaml: version %q, appVersion %q; want %q and %q (CHANGELOG.md's latest release)", chart.Version, chart.AppVersion, latest, tag)
	}

	var plugin struct {
		Spec struct {
			Version string `json:"version"`
		} `json:"spec"`
	}
	readYAML(t, "../../plugins/dlq.yaml", &plugin)
	if plugin.Spec.Version != tag {
		t.Errorf("plugins/dlq.yaml: spec.version %q, want %q (CHANGELOG.md's latest release; plugins/release.sh %s writes it)", plugin.Spec.Version, tag, tag)
	}

	var kustomization struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	readYAML(t, "../../config/manager/kustomization.yaml", &kustomization)
	if len(kustomization.Images) != 2 {
		t.Fatalf("config/manager/kustomization.yaml: %d images, want the controller's and the dispatcher's", len(kustomization.Images))
	}
	for _, img := range kustomization.Images {
		if img.NewTag != tag {
			t.Errorf("config/manager/kustomization.yaml: image %s has newTag %q, want %q (the chart's appVersion)", img.Name, img.NewTag, tag)
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
