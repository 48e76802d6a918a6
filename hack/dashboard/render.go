package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retryops/retry-operator/internal/dashboard"
)

// series is one series of a query's result over the range.
type series struct {
	Legend string
	Labels map[string]string
	Times  []time.Time
	Values []float64
}

// panelData is a panel with what its queries returned.
type panelData struct {
	dashboard.Panel
	Series []series
}

func renderCommand(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	promURL := fs.String("prometheus", "", "Prometheus' base URL (http://127.0.0.1:9090).")
	rng := fs.Duration("range", 15*time.Minute, "Time range to draw, ending at -end.")
	endFlag := fs.String("end", "", "End of the range (RFC 3339); default Prometheus' own time().")
	out := fs.String("o", "docs/dashboard.svg", "SVG file to write.")
	namespace := fs.String("namespace", ".*", "Value of the namespace variable (a regular expression, as Grafana's All).")
	pipeline := fs.String("pipeline", ".*", "Value of the pipeline variable.")
	queue := fs.String("queue", ".*", "Value of the queue variable.")
	caption := fs.String("caption", "", "Line printed under the title: where the data came from.")
	_ = fs.Parse(args)
	if *promURL == "" {
		return fmt.Errorf("-prometheus is required")
	}
	c := &promClient{base: strings.TrimSuffix(*promURL, "/"), http: &http.Client{Timeout: 30 * time.Second}}
	var end time.Time
	if *endFlag != "" {
		t, err := time.Parse(time.RFC3339, *endFlag)
		if err != nil {
			return err
		}
		end = t
	} else {
		t, err := c.now()
		if err != nil {
			return err
		}
		end = t
	}
	start := end.Add(-*rng)
	// About 150 points per series; the rate window four steps wide, as Grafana's $__rate_interval.
	step := max((*rng / 150).Truncate(time.Second), 5*time.Second)
	vars := map[string]string{
		"namespace": *namespace, "pipeline": *pipeline, "queue": *queue,
		"__rate_interval": promDuration(max(4*step, time.Minute)), "__interval": promDuration(step), "__range": promDuration(*rng),
	}
	var panels []panelData
	for _, p := range dashboard.Panels() {
		pd := panelData{Panel: p}
		for _, q := range p.Queries {
			ss, err := c.queryRange(dashboard.Expand(q.Expr, vars), start, end, step)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			for i := range ss {
				ss[i].Legend = legend(q.Legend, ss[i].Labels)
			}
			pd.Series = append(pd.Series, ss...)
		}
		panels = append(panels, pd)
	}
	if *caption == "" {
		*caption = fmt.Sprintf("Drawn by hack/dashboard from %s of Prometheus data, %s to %s UTC", *rng, start.UTC().Format("2006-01-02 15:04"), end.UTC().Format("15:04"))
	}
	svg := drawDashboard(panels, start, end, *caption)
	return os.WriteFile(*out, []byte(svg), 0o644)
}

func promDuration(d time.Duration) string {
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// legend fills Grafana's legend format ({{label}}) from a series' labels.
func legend(format string, labels map[string]string) string {
	if format == "" {
		var parts []string
		for k, v := range labels {
			parts = append(parts, k+"="+v)
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	out := format
	for k, v := range labels {
		out = strings.ReplaceAll(out, "{{"+k+"}}", v)
	}
	return out
}

type promClient struct {
	base string
	http *http.Client
}

type promResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
			Values [][]any           `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

func (c *promClient) get(path string, params url.Values) (*promResponse, error) {
	resp, err := c.http.Get(c.base + path + "?" + params.Encode())
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var r promResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s %s: %s", path, params.Get("query"), r.Error)
	}
	return &r, nil
}

// now is Prometheus' time: the range ends where its data does, whatever this machine's clock says.
func (c *promClient) now() (time.Time, error) {
	resp, err := c.http.Get(c.base + "/api/v1/query?" + url.Values{"query": {"time()"}}.Encode())
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	// A scalar's result is [timestamp, "value"], not the vector's objects promResponse holds.
	var raw struct {
		Data struct {
			Result []any `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return time.Time{}, fmt.Errorf("time(): %w", err)
	}
	if len(raw.Data.Result) != 2 {
		return time.Time{}, fmt.Errorf("time(): unexpected result %v", raw.Data.Result)
	}
	ts, ok := raw.Data.Result[0].(float64)
	if !ok {
		return time.Time{}, fmt.Errorf("time(): unexpected timestamp %v", raw.Data.Result[0])
	}
	return time.Unix(int64(ts), 0).UTC(), nil
}

func (c *promClient) queryRange(query string, start, end time.Time, step time.Duration) ([]series, error) {
	r, err := c.get("/api/v1/query_range", url.Values{
		"query": {query},
		"start": {strconv.FormatInt(start.Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix(), 10)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
	if err != nil {
		return nil, err
	}
	var out []series
	for _, res := range r.Data.Result {
		s := series{Labels: res.Metric}
		for _, v := range res.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			// Grafana leaves NaN (a quantile of no observations) and infinities undrawn too.
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			s.Times = append(s.Times, time.Unix(int64(ts), 0))
			s.Values = append(s.Values, f)
		}
		if len(s.Values) > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return legendKey(out[i].Labels) < legendKey(out[j].Labels) })
	return out, nil
}

func legendKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + labels[k] + ",")
	}
	return b.String()
}
