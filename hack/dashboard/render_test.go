package main

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/internal/dashboard"
)

// fakePrometheus answers time() and every range query with a series whose value tells which query
// it answers; the dead-letter actions' queries get no series.
func fakePrometheus(t *testing.T, queries *[]string) *httptest.Server {
	var mu sync.Mutex
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("query")
		mu.Lock()
		*queries = append(*queries, q)
		mu.Unlock()
		switch {
		case r.URL.Path == "/api/v1/query" && q == "time()":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"scalar","result":[1795700000,"1795700000"]}}`)
		case r.URL.Path != "/api/v1/query_range":
			http.NotFound(w, r)
		case strings.Contains(q, "retryops_deadletter_action"):
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
		case strings.Contains(q, "circuit_state"):
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"shop","pipeline":"chat"},"values":[[1795699400,"0"],[1795699700,"2"]]}]}}`)
		case strings.Contains(q, "retry_backlog{") && strings.HasPrefix(q, "max by"):
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"shop","consumerpipeline":"chat"},"values":[[1795699400,"10"],[1795700000,"250"]]}]}}`)
		default:
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"namespace":"shop","consumerpipeline":"chat","le":"0.5"},"values":[[1795699400,"1"],[1795699700,"NaN"],[1795700000,"3"]]}]}}`)
		}
	}))
}

// TestRenderDrawsEveryPanelFromPrometheus renders against a fake Prometheus: every panel is drawn
// under its title from what its queries returned, with the variables substituted, and a panel whose
// queries return nothing says so.
func TestRenderDrawsEveryPanelFromPrometheus(t *testing.T) {
	var queries []string
	srv := fakePrometheus(t, &queries)
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "dashboard.svg")
	if err := renderCommand([]string{"-prometheus", srv.URL, "-range", "10m", "-o", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, p := range dashboard.Panels() {
		if !strings.Contains(svg, ">"+html.EscapeString(p.Title)+"<") {
			t.Errorf("no panel titled %q", p.Title)
		}
	}
	for what, want := range map[string]string{
		"the empty actions panel":                  "No data",
		"the gauge's last value past 200, in red":  `fill="#E02F44" text-anchor="middle" font-weight="bold">250<`,
		"the range ending at Prometheus' own time": "2026-11-26 13:23 to 13:33 UTC",
		"a series' legend from its labels":         ">shop/chat<",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("%s: %q is not in the SVG", what, want)
		}
	}
	// A band of the state timeline (its height has a decimal; the legend's square has none).
	if !regexp.MustCompile(`height="\d+\.\d" fill="#E02F44"/>`).MatchString(svg) {
		t.Error("the Open circuit is not drawn in red")
	}
	if strings.Contains(svg, "NaN") {
		t.Error("a NaN was drawn")
	}
	if len(queries) < len(dashboard.Panels())+1 {
		t.Errorf("only %d queries for %d panels", len(queries), len(dashboard.Panels()))
	}
	for _, q := range queries {
		if strings.Contains(q, "$") {
			t.Errorf("a query reached Prometheus with a variable: %s", q)
		}
	}
}
