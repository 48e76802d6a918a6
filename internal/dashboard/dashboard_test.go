package dashboard_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	sdk "github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/retryops/retry-operator/internal/dashboard"
	"github.com/retryops/retry-operator/internal/promcheck"
)

const dashboardFile = "../../config/grafana/retry-operator-dashboard.json"

// TestTheDashboardFileIsCurrent fails when config/grafana's JSON is not what the code builds: run
// `make dashboard` and commit it.
func TestTheDashboardFileIsCurrent(t *testing.T) {
	want, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run `make dashboard` and commit it", dashboardFile)
	}
}

// exprs returns every PromQL expression of the dashboard, by where it is: the panels' queries and
// the selectors of the variables' label_values queries.
func exprs() map[string]string {
	out := map[string]string{}
	for _, p := range dashboard.Panels() {
		for i, q := range p.Queries {
			out[p.Title+" #"+string(rune('A'+i))] = q.Expr
		}
	}
	for _, v := range dashboard.Variables {
		out["variable "+v.Name] = v.Selector
	}
	return out
}

// grafanaVars are values for the variables Grafana substitutes before a query reaches Prometheus.
var grafanaVars = map[string]string{"namespace": "shop", "pipeline": "chat", "queue": "chat-dlq", "__rate_interval": "1m", "__range": "1h", "__interval": "15s"}

// TestEveryQueryNamesExportedMetrics checks every expression with the alert rules' check: each
// selects a metric the dispatcher or the operator exports, by labels it has, and every selector of
// a namespaced metric is scoped by the namespace variable.
func TestEveryQueryNamesExportedMetrics(t *testing.T) {
	for where, expr := range exprs() {
		for _, p := range promcheck.Problems(expr) {
			t.Errorf("%s %s: %s", where, p, expr)
		}
		for _, sel := range promcheck.Selectors(expr) {
			if labels, _ := promcheck.LabelsOf(sel.Metric); slices.Contains(labels, "namespace") && !slices.Contains(sel.Labels, "namespace") {
				t.Errorf("%s: %s ignores the namespace variable", where, sel.Text)
			}
		}
		if strings.Contains(dashboard.Expand(expr, grafanaVars), "$") {
			t.Errorf("%s uses a variable the dashboard does not define: %s", where, expr)
		}
	}
}

// TestEveryQueryParses has Prometheus' parser (promtool) check every expression, its variables
// substituted as Grafana does.
func TestEveryQueryParses(t *testing.T) {
	promtool, err := promcheck.Promtool(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("promtool is needed (hack/setup-prometheus.sh): %v", err)
	}
	var all []string
	for _, e := range exprs() {
		all = append(all, dashboard.Expand(e, grafanaVars))
	}
	slices.Sort(all)
	if err := promcheck.ParseWithPromtool(promtool, all); err != nil {
		t.Error(err)
	}
}

func TestExpand(t *testing.T) {
	got := dashboard.Expand(`rate(x{a=~"$namespace", b="${pipeline}", c="$other"}[$__rate_interval])`, grafanaVars)
	if want := `rate(x{a=~"shop", b="chat", c="$other"}[1m])`; got != want {
		t.Errorf("Expand = %s, want %s", got, want)
	}
}

// The built JSON, as Grafana reads it.
type grafanaDashboard struct {
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		Description string `json:"description"`
		Datasource  struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		FieldConfig struct {
			Defaults struct {
				Unit       string `json:"unit"`
				Thresholds struct {
					Steps []struct {
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestTheDashboardShowsSeed003 checks the JSON Grafana gets: seed 003's panels (the gauge with its
// thresholds 50 and 200), the other panels the project's operators need, a unit and a description
// on every panel, the data source as the ${datasource} variable, and the variables.
func TestTheDashboardShowsSeed003(t *testing.T) {
	b, err := dashboard.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	titles := map[string]string{}
	for _, p := range d.Panels {
		titles[p.Title] = p.Type
		if p.Type == "row" {
			continue
		}
		if p.Description == "" || p.FieldConfig.Defaults.Unit == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q lacks a description, a unit or a query", p.Title)
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q has data source %+v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if p.Type == "gauge" {
			var steps []float64
			for _, s := range p.FieldConfig.Defaults.Thresholds.Steps[1:] {
				steps = append(steps, *s.Value)
			}
			if !slices.Equal(steps, []float64{50, 200}) {
				t.Errorf("gauge %q has thresholds %v, want 50 and 200", p.Title, steps)
			}
		}
	}
	for title, kind := range map[string]string{
		"Stuck documents: records waiting in retry tiers": "gauge",
		"Retry rate per pipeline":                         "timeseries",
		"Max retries exceeded: dead letters by reason":    "timeseries",
		"Backoff skipped: retries not yet due":            "timeseries",
		"Job duration: delivery duration":                 "heatmap",
		"Dead-letter growth per queue":                    "timeseries",
		"Oldest pending dead letter per queue":            "timeseries",
		"Consumer lag and due lag":                        "timeseries",
		"Circuit state":                                   "state-timeline",
		"Retry lateness":                                  "timeseries",
		"Dead-letter actions":                             "timeseries",
		dashboard.RowRetryPolicy:                          "row",
	} {
		if titles[title] != kind {
			t.Errorf("no %s panel %q (panels: %v)", kind, title, titles)
		}
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Type+" "+v.Name)
		if v.Type == "query" && !strings.HasPrefix(v.Query.(string), "label_values(") {
			t.Errorf("variable %s's query is %v, want label_values", v.Name, v.Query)
		}
	}
	if want := []string{"datasource datasource", "query namespace", "query pipeline", "query queue"}; !slices.Equal(vars, want) {
		t.Errorf("variables %v, want %v", vars, want)
	}
}

// TestTheDocumentationShowsEveryPanel keeps docs/dashboard.md in step: a section per panel, with
// its queries as the dashboard runs them and what to do when it is red.
func TestTheDocumentationShowsEveryPanel(t *testing.T) {
	b, err := os.ReadFile("../../docs/dashboard.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, p := range dashboard.Panels() {
		i := strings.Index(doc, "\n### "+p.Title+"\n")
		if i < 0 {
			t.Errorf("docs/dashboard.md has no section %q", p.Title)
			continue
		}
		section := doc[i+1:]
		if j := strings.Index(section[4:], "\n#"); j >= 0 {
			section = section[:j+4]
		}
		for _, q := range p.Queries {
			if !strings.Contains(section, "\n"+q.Expr+"\n") {
				t.Errorf("docs/dashboard.md's section %q lacks the query %s", p.Title, q.Expr)
			}
		}
		if !strings.Contains(section, "**When it is red:**") {
			t.Errorf("docs/dashboard.md's section %q does not say what to do when it is red", p.Title)
		}
	}
}

// TestTheJSONReadsBackIntoGrafanasModel reads the file into the SDK's dashboard model (panels and
// queries as their plugin types) and writes it back unchanged: nothing in it is unknown to the model.
func TestTheJSONReadsBackIntoGrafanasModel(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d sdk.Dashboard //nolint:staticcheck // the classic model the generator writes (internal/dashboard.Build)
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s does not read as a Grafana dashboard: %v", dashboardFile, err)
	}
	again, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(again, '\n'), b) {
		t.Errorf("%s changes when read and written back", dashboardFile)
	}
}
