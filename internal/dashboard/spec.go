// Package dashboard is the operator's Grafana dashboard, built from code with the Grafana Foundation
// SDK: the panels of seed 003's "Retry Policy Monitoring" dashboard mapped onto the metrics the
// dispatcher (sdk/metrics) and the operator (internal/opmetrics) export, and more.
// Panels lists them as plain data, which JSON turns into the dashboard (written to
// config/grafana/retry-operator-dashboard.json by hack/dashboard) and from which hack/dashboard
// draws docs/dashboard.svg, so the picture and the dashboard show the same queries.
package dashboard

import (
	"math"
	"regexp"
	"strings"
)

// Kind is a panel's visualization.
type Kind string

// The visualizations the dashboard uses.
const (
	TimeSeries    Kind = "timeseries"
	Gauge         Kind = "gauge"
	StateTimeline Kind = "state-timeline"
	Heatmap       Kind = "heatmap"
)

// Query is one PromQL query of a panel, with Grafana's legend format.
type Query struct {
	Expr   string
	Legend string
}

// Step is a threshold: from Value (-Inf for the base) on, the panel shows Color.
type Step struct {
	Value float64
	Color string
}

// State is a value of a state timeline, shown as Text in Color.
type State struct {
	Value int
	Text  string
	Color string
}

// Panel is one panel of the dashboard.
type Panel struct {
	// Row is the title of the row the panel sits in.
	Row         string
	Kind        Kind
	Title       string
	Description string
	// Unit is Grafana's unit id ("short", "s", "suffix: records/s").
	Unit       string
	Queries    []Query
	Thresholds []Step
	States     []State
	// Width is the panel's width in Grafana's 24 columns.
	Width uint32
}

// Variable is a dashboard variable whose values are label_values(Selector, Of).
type Variable struct {
	Name, Label, Description string
	// Selector and Of make its query: the values of label Of in the series Selector selects.
	Selector, Of string
}

// Units.
const (
	unitCount          = "short"
	unitSeconds        = "s"
	unitRecordsPerSec  = "suffix: records/s"
	unitRecordsPerMin  = "suffix: records/min"
	colorOK            = "green"
	colorWarning       = "orange"
	colorCritical      = "red"
	colorCaution       = "yellow"
	datasourceVariable = "datasource"
)

// base is the first threshold step: what a panel shows below every threshold.
var base = Step{Value: math.Inf(-1), Color: colorOK}

var reVariable = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)\}?`)

// Expand substitutes Grafana's variables in expr ($name or ${name}) from vars; a variable vars
// lacks is left as written.
func Expand(expr string, vars map[string]string) string {
	return reVariable.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		if value, ok := vars[name]; ok {
			return value
		}
		return v
	})
}
