// Package promcheck checks PromQL expressions against the metrics this project exports: the metric
// names an expression selects (MetricNames), whether the dispatcher or the operator exports each
// (Exported), and the labels its selectors match on (Problems). The generated alert rules
// (internal/render) and the Grafana dashboard (internal/dashboard) are both checked with it, so a
// renamed metric fails both.
package promcheck

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/retryops/retry-operator/internal/opmetrics"
	dmetrics "github.com/retryops/retry-operator/sdk/metrics"
)

var (
	reString    = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	reNameMatch = regexp.MustCompile(`__name__\s*=\s*"([^"]+)"`)
	reBraces    = regexp.MustCompile(`\{[^}]*\}`)
	reBrackets  = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reOffset    = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+`)
	reNumber    = regexp.MustCompile(`(?i)\b(?:0x[0-9a-f]+|[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\b`)
	reIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// A selector with matchers: the metric name, then its matchers.
	reSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	reMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"`)
)

// promqlWords are PromQL keywords and literals that look like identifiers.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// MetricNames extracts the metric names an expression selects: identifiers that are not functions or
// aggregations (followed by "("), keywords, label names (inside braces or grouping lists), strings,
// numbers or durations; plus names given as {__name__="..."}.
func MetricNames(expr string) []string {
	var names []string
	for _, m := range reNameMatch.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	s := reString.ReplaceAllString(expr, `""`)
	s = reBraces.ReplaceAllString(s, " ")
	s = reBrackets.ReplaceAllString(s, " ")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reOffset.ReplaceAllString(s, " ")
	s = reNumber.ReplaceAllString(s, " ")
	for _, loc := range reIdent.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if promqlWords[word] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		names = append(names, word)
	}
	sort.Strings(names)
	return slices.Compact(names)
}

// Selector is one metric selector with matchers in an expression.
type Selector struct {
	// Text is the selector as written.
	Text string
	// Metric is the metric name.
	Metric string
	// Labels are the label names it matches on, in order.
	Labels []string
}

// Selectors returns the selectors with matchers (name{...}) of an expression.
func Selectors(expr string) []Selector {
	var sels []Selector
	for _, m := range reSelector.FindAllStringSubmatch(expr, -1) {
		s := Selector{Text: m[0], Metric: m[1]}
		for _, lm := range reMatcher.FindAllStringSubmatch(m[2], -1) {
			s.Labels = append(s.Labels, lm[1])
		}
		sels = append(sels, s)
	}
	return sels
}

// actionCounters are the operator's counters beside opmetrics.All (internal/opmetrics/actions.go),
// with their labels.
var actionCounters = map[string][]string{
	opmetrics.DeadLetterActions:       {"action", "result"},
	opmetrics.DeadLetterActionRecords: {"action"},
}

// Exported reports whether the dispatcher or the operator exports name (a histogram's _bucket, _sum
// and _count series included).
func Exported(name string) bool {
	_, ok := actionCounters[name]
	return ok || dmetrics.Exported(name) || opmetrics.Exported(name)
}

// LabelsOf returns the label names a metric may be selected by: its own, plus the target label
// namespace that Prometheus adds to the dispatcher's series (the operator's carry it themselves).
func LabelsOf(name string) ([]string, bool) {
	for _, d := range dmetrics.All {
		if name == d.Name || strings.HasPrefix(name, d.Name+"_") && d.Type == "histogram" {
			return append([]string{"namespace"}, d.Labels...), true
		}
	}
	for _, d := range opmetrics.All {
		if name == d.Name {
			return d.Labels, true
		}
	}
	labels, ok := actionCounters[name]
	return labels, ok
}

// Problems returns what is wrong with expr: it selects no metric, a metric nobody exports, or
// matches a metric on a label it does not have.
func Problems(expr string) []string {
	var problems []string
	names := MetricNames(expr)
	if len(names) == 0 {
		problems = append(problems, "selects no metric")
	}
	for _, n := range names {
		if !Exported(n) {
			problems = append(problems, fmt.Sprintf("uses %s, which neither the dispatcher nor the operator exports", n))
		}
	}
	for _, sel := range Selectors(expr) {
		labels, ok := LabelsOf(sel.Metric)
		if !ok {
			continue // reported above
		}
		for _, l := range sel.Labels {
			if !slices.Contains(labels, l) {
				problems = append(problems, fmt.Sprintf("matches %s on label %s, which it does not have (%v)", sel.Metric, l, labels))
			}
		}
	}
	return problems
}
