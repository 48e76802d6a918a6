package render_test

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// wantTiers are the tiers as docs/runbooks.md documents them (seed 003's warning, critical and
// engineering lead), written out so that a change to render.AlertTiers is a change here too.
var wantTiers = map[string][2]string{
	render.AlertConsumerLagHigh:                        {"warning", ""},
	render.AlertRetryBacklogHigh:                       {"warning", ""},
	render.AlertCircuitOpen:                            {"warning", ""},
	render.AlertDispatcherDown:                         {"critical", ""},
	render.AlertDeadLettersStuck:                       {"critical", ""},
	render.AlertDeadLetterQueueSize:                    {"warning", ""},
	render.AlertDeadLetterQueueGrowth:                  {"critical", ""},
	render.AlertDeadLetterQueueOldestMessage:           {"warning", ""},
	render.AlertDeadLetterQueueSizeEscalation:          {"critical", "engineering-lead"},
	render.AlertDeadLetterQueueOldestMessageEscalation: {"critical", "engineering-lead"},
}

func TestEveryRenderedAlertCarriesItsTierAndRunbook(t *testing.T) {
	const base = "https://wiki.example.com/retry/runbooks"
	var files []render.RuleFile
	for _, tc := range allCases {
		in := tc.inputs(t)
		in.RunbookBaseURL = base
		f, err := render.AlertRules(in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		files = append(files, f)
	}
	for _, d := range []*retryv1alpha1.DeadLetterQueue{defaultDLQ(), sinkRefSecretsInputs(t).DLQ} {
		f, err := render.DeadLetterQueueAlertRules(&render.DeadLetterQueueInputs{DLQ: d, RunbookBaseURL: base})
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	seen := map[string]bool{}
	for _, f := range files {
		for _, r := range f.Groups[0].Rules {
			seen[r.Alert] = true
			want, ok := wantTiers[r.Alert]
			if !ok {
				t.Errorf("%s has no tier in wantTiers (nor, then, in docs/runbooks.md's table)", r.Alert)
				continue
			}
			if r.Labels["severity"] != want[0] || r.Labels[render.LabelEscalation] != want[1] {
				t.Errorf("%s: severity %q escalation %q, want %q %q", r.Alert, r.Labels["severity"], r.Labels[render.LabelEscalation], want[0], want[1])
			}
			if got, want := r.Annotations["runbook_url"], base+"#"+strings.ToLower(r.Alert); got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
		}
	}
	for _, tier := range render.AlertTiers {
		if !seen[tier.Alert] {
			t.Errorf("no rendered rule file holds %s", tier.Alert)
		}
		if w := wantTiers[tier.Alert]; tier.Severity != w[0] || tier.Escalation != w[1] {
			t.Errorf("render.AlertTiers gives %s %q %q, want %q %q", tier.Alert, tier.Severity, tier.Escalation, w[0], w[1])
		}
	}
	if len(render.AlertTiers) != len(wantTiers) {
		t.Errorf("render.AlertTiers has %d alerts, wantTiers %d", len(render.AlertTiers), len(wantTiers))
	}
}

func TestRunbookURLs(t *testing.T) {
	if got := render.RunbookURL("", render.AlertDeadLetterQueueSizeEscalation); got != "https://github.com/retryops/retry-operator/blob/main/docs/runbooks.md#deadletterqueuesizeescalation" {
		t.Errorf("default runbook URL %s", got)
	}
	for s, ok := range map[string]bool{
		"https://github.com/retryops/retry-operator/blob/main/docs/runbooks.md": true,
		"http://wiki.internal/runbooks":                                         true,
		"wiki.internal/runbooks":                                                false,
		"/docs/runbooks.md":                                                     false,
		"ftp://wiki.internal/runbooks":                                          false,
		"https://wiki.internal/runbooks#x":                                      false,
		"https://wiki.internal/runbooks#":                                       false,
		"https:///runbooks":                                                     false,
		"https://wiki.internal/a b%zz.md":                                       false,
		"https://wiki.internal/r.md?page=1":                                     true,
	} {
		if err := render.ValidRunbookBaseURL(s); (err == nil) != ok {
			t.Errorf("ValidRunbookBaseURL(%q) = %v, want ok %v", s, err, ok)
		}
	}
}

func TestDeadLetterQueueEscalationThresholds(t *testing.T) {
	week := 7 * 24 * time.Hour
	for name, tc := range map[string]struct {
		alerts        *retryv1alpha1.DeadLetterAlerts
		messages      int64
		age           time.Duration
		warnMessages  int64
		warnOldestAge time.Duration
	}{
		"no alerts: seed 003's 1000 and 7 days": {nil, 1000, week, 500, 24 * time.Hour},
		"warning thresholds below the defaults leave them": {&retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](999), MaxOldestAge: pdur(167 * time.Hour)},
			1000, week, 999, 167 * time.Hour},
		"warning thresholds at the defaults double them": {&retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](1000), MaxOldestAge: pdur(week)},
			2000, 2 * week, 1000, week},
		"explicit escalation thresholds win": {&retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](5000), EscalateMessages: ptr.To[int64](6000), EscalateOldestAge: pdur(48 * time.Hour)},
			6000, 48 * time.Hour, 5000, 24 * time.Hour},
	} {
		d := defaultDLQ()
		d.Spec.Alerts = tc.alerts
		th := render.DeadLetterQueueAlertThresholds(d)
		if th.EscalateMessages != tc.messages || th.EscalateOldestAge != tc.age || th.MaxMessages != tc.warnMessages || th.MaxOldestAge != tc.warnOldestAge {
			t.Errorf("%s: %+v", name, th)
		}
	}
}

var (
	reHeading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	reAnchor  = regexp.MustCompile(`\]\(#([^)]*)\)`)
)

// githubAnchor is the anchor GitHub gives a heading: lower case, punctuation other than hyphens and
// underscores dropped, spaces as hyphens, a repeated one suffixed -1, -2.
func githubAnchor(heading string, used map[string]int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	a := b.String()
	if n := used[a]; n > 0 {
		used[a] = n + 1
		return a + "-" + strconv.Itoa(n)
	}
	used[a] = 1
	return a
}

// runbookProblems checks a runbooks page against the alerts: one "## <Alert>" section per alert and
// no other, each stating its tier and the four parts, and every in-page link resolving.
func runbookProblems(doc string, tiers []render.AlertTier) []string {
	var problems []string
	sections := map[string]string{} // alert anchor -> section text
	anchors := map[string]bool{}
	used := map[string]int{}
	var current string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if m := reHeading.FindStringSubmatch(line); m != nil && !fenced {
			a := githubAnchor(m[2], used)
			anchors[a] = true
			current = ""
			if len(m[1]) == 2 {
				if _, dup := sections[a]; dup {
					problems = append(problems, "two sections "+m[2])
				}
				current, sections[a] = a, ""
			}
			continue
		}
		if current != "" {
			sections[current] += line + "\n"
		}
	}
	for _, m := range reAnchor.FindAllStringSubmatch(doc, -1) {
		if !anchors[m[1]] {
			problems = append(problems, "a link to #"+m[1]+", which no heading has")
		}
	}
	known := map[string]bool{}
	for _, tier := range tiers {
		a := strings.ToLower(tier.Alert)
		known[a] = true
		text, ok := sections[a]
		if !ok {
			problems = append(problems, "no section ## "+tier.Alert)
			continue
		}
		want := []string{"`severity: " + tier.Severity + "`", "**What it means.**", "**How to look.**", "**What to do.**", "**When to escalate.**"}
		if tier.Escalation != "" {
			want = append(want, "`"+render.LabelEscalation+": "+tier.Escalation+"`")
		} else if strings.Contains(text, "`"+render.LabelEscalation+": ") {
			problems = append(problems, tier.Alert+" claims an escalation label it does not carry")
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				problems = append(problems, tier.Alert+" does not say "+w)
			}
		}
	}
	for a := range sections {
		if !known[a] {
			problems = append(problems, "section #"+a+" names no alert")
		}
	}
	slices.Sort(problems)
	return problems
}

func TestEveryAlertHasARunbookSectionAndEverySectionAnAlert(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range runbookProblems(string(doc), render.AlertTiers) {
		t.Error("docs/runbooks.md: " + p)
	}
}

func TestTheRunbookCheckFindsMissingAndExtraSections(t *testing.T) {
	doc := "# Runbooks\n\n```sh\n## not a heading\n```\n\n" +
		"## ConsumerLagHigh\n`severity: warning`\n**What it means.** **How to look.** **What to do.** **When to escalate.** See [x](#dispatcherdown).\n\n" +
		"## RetryBacklogHigh\n`severity: critical`\n\n" +
		"## NoSuchAlert\n"
	got := runbookProblems(doc, []render.AlertTier{
		{Alert: render.AlertConsumerLagHigh, Severity: "warning"},
		{Alert: render.AlertRetryBacklogHigh, Severity: "warning"},
		{Alert: render.AlertDeadLetterQueueSizeEscalation, Severity: "critical", Escalation: "engineering-lead"},
	})
	want := []string{
		"no section ## DeadLetterQueueSizeEscalation",
		"RetryBacklogHigh does not say **How to look.**",
		"RetryBacklogHigh does not say `severity: warning`",
		"a link to #dispatcherdown, which no heading has",
		"section #nosuchalert names no alert",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, w) }) {
			t.Errorf("no problem about %q in %q", w, got)
		}
	}
	if slices.ContainsFunc(got, func(p string) bool {
		return strings.Contains(p, "ConsumerLagHigh") || strings.Contains(p, "not a heading")
	}) {
		t.Errorf("a complete section or a fenced line reported: %q", got)
	}
	used := map[string]int{}
	for _, tc := range []struct{ heading, want string }{
		{"DeadLetterQueueSize", "deadletterqueuesize"},
		{"Why a label and not `severity: page`.", "why-a-label-and-not-severity-page"},
		{"DeadLetterQueueSize", "deadletterqueuesize-1"},
	} {
		if got := githubAnchor(tc.heading, used); got != tc.want {
			t.Errorf("githubAnchor(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestTheGrowthWindowIsThreeRefreshesAndNeverWraps: an interval an author set near the largest
// Duration saturates instead of wrapping negative (and so back to GrowthWindow).
func TestTheGrowthWindowIsThreeRefreshesAndNeverWraps(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		want     time.Duration
	}{
		{0, render.GrowthWindow},
		{time.Second, render.GrowthWindow},
		{time.Hour, 3 * time.Hour},
		{900000 * time.Hour, math.MaxInt64},
	} {
		d := &retryv1alpha1.DeadLetterQueue{}
		if tc.interval > 0 {
			d.Spec.StatusRefreshInterval = &metav1.Duration{Duration: tc.interval}
		}
		if got := render.DeadLetterQueueGrowthWindow(d); got != tc.want {
			t.Errorf("interval %v: window %v, want %v", tc.interval, got, tc.want)
		}
	}
}
