package dlqui

import (
	"bytes"
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// staticFiles are the embedded assets under /static/.
func staticFiles() fs.FS {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	return sub
}

// pages are the parsed templates: each page with the layout.
var pages = parsePages()

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"time":    formatTime,
		"join":    strings.Join,
		"lower":   strings.ToLower,
		"percent": func(f float64) string { return strconv.FormatFloat(f*100, 'f', 0, 64) },
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, p := range []string{"overview", "queue", "letter", "actions", "action", "error"} {
		t := template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+p+".html"))
		out[p] = t
	}
	return out
}

// formatTime writes t in UTC to the second; "–" when unset.
func formatTime(t any) string {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *metav1.Time:
		if v != nil {
			tt = v.Time
		}
	case metav1.Time:
		tt = v.Time
	}
	if tt.IsZero() {
		return "–"
	}
	return tt.UTC().Format("2006-01-02 15:04:05Z")
}

func timePtr(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }

// bar is one bar of a horizontal bar chart: its width in percent of the longest.
type bar struct {
	Name  string
	Count int64
	Width float64
}

// bars draws counts as bars, largest first.
func bars(counts []retryv1alpha1.NamedCount) []bar {
	cs := slices.Clone(counts)
	slices.SortStableFunc(cs, func(a, b retryv1alpha1.NamedCount) int { return int(b.Count - a.Count) })
	var top int64
	for _, c := range cs {
		top = max(top, c.Count)
	}
	out := make([]bar, 0, len(cs))
	for _, c := range cs {
		w := 0.0
		if top > 0 {
			w = float64(c.Count) / float64(top) * 100
		}
		out = append(out, bar{Name: c.Name, Count: c.Count, Width: w})
	}
	return out
}

// spark is a sparkline: an SVG polyline's points in a 120×28 box, and what it shows in words.
type spark struct {
	Points string
	Label  string
}

const sparkW, sparkH = 120.0, 28.0

// sparkline draws the pending counts of samples; empty when fewer than two.
func sparkline(ss []sample) spark {
	if len(ss) < 2 {
		return spark{Label: "not enough samples yet: the console adds one at each status refresh it sees"}
	}
	lo, hi := ss[0].pending, ss[0].pending
	for _, s := range ss {
		lo, hi = min(lo, s.pending), max(hi, s.pending)
	}
	var b strings.Builder
	for i, s := range ss {
		x := float64(i) / float64(len(ss)-1) * sparkW
		y := sparkH / 2
		if hi > lo {
			y = sparkH - 2 - float64(s.pending-lo)/float64(hi-lo)*(sparkH-4)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", x, y)
	}
	first, last := ss[0], ss[len(ss)-1]
	return spark{
		Points: b.String(),
		Label: fmt.Sprintf("pending went from %d to %d over %s (%d samples)", first.pending, last.pending,
			last.at.Sub(first.at).Round(time.Second), len(ss)),
	}
}

// queueView is one queue on the overview.
type queueView struct {
	Name          string
	Topic         string
	Messages      int64
	Pending       int64
	OldestPending *metav1.Time
	LastRefresh   *metav1.Time
	// Growth is the average arrival rate of the dead letters held, per minute ("" when unknown).
	Growth  string
	Reasons []bar
	States  []bar
	Spark   spark
	Ready   string
}

func newQueueView(q *retryv1alpha1.DeadLetterQueue, ss []sample) queueView {
	v := queueView{Name: q.Name, Topic: q.Status.Topic, OldestPending: q.Status.OldestPendingTime, LastRefresh: q.Status.LastRefreshTime,
		Reasons: bars(q.Status.Reasons), States: bars(q.Status.States), Spark: sparkline(ss)}
	if q.Status.Messages != nil {
		v.Messages = *q.Status.Messages
	}
	if q.Status.Pending != nil {
		v.Pending = *q.Status.Pending
	}
	if o, n := q.Status.OldestMessageTime, q.Status.NewestMessageTime; o != nil && n != nil && v.Messages > 1 {
		if span := n.Sub(o.Time).Minutes(); span > 0 {
			v.Growth = strconv.FormatFloat(float64(v.Messages)/span, 'f', 1, 64)
		}
	}
	for _, c := range q.Status.Conditions {
		if c.Type == retryv1alpha1.ConditionReady {
			v.Ready = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				v.Ready += ": " + c.Reason
			}
		}
	}
	return v
}

// payloadView is a key or value for a person: pretty JSON, text, or base64 said so.
type payloadView struct {
	Text      string
	Kind      string
	Size      int64
	Truncated bool
}

func newPayloadView(p *dlv1.Payload) *payloadView {
	if p == nil {
		return nil
	}
	v := &payloadView{Text: p.Data, Kind: "text", Size: p.Size, Truncated: p.Truncated}
	switch {
	case p.Encoding == dlv1.EncodingBase64:
		v.Kind = "binary (base64)"
		if raw, err := base64.StdEncoding.DecodeString(p.Data); err == nil && json.Valid(raw) {
			v.Text, v.Kind = prettyJSON(raw), "JSON"
		}
	case looksJSON(p.Data):
		v.Text, v.Kind = prettyJSON([]byte(p.Data)), "JSON"
	}
	return v
}

// looksJSON reports whether s is a JSON object or array (a bare number or string stays text).
func looksJSON(s string) bool {
	t := strings.TrimSpace(s)
	return t != "" && (t[0] == '{' || t[0] == '[') && json.Valid([]byte(t))
}

func prettyJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// actionView is an action's progress, for its page and the polling endpoint (JSON).
type actionView struct {
	Name    string `json:"name"`
	Queue   string `json:"queue"`
	Action  string `json:"action"`
	DryRun  bool   `json:"dryRun"`
	Phase   string `json:"phase"`
	Matched int64  `json:"matched"`
	Done    int64  `json:"done"`
	Skipped int64  `json:"skipped"`
	// SkippedWhy counts the skipped by reason: "ReplayLimit 2, NoTarget 1".
	SkippedWhy string   `json:"skippedWhy,omitempty"`
	Failed     int64    `json:"failed"`
	Percent    int      `json:"percent"`
	Finished   bool     `json:"finished"`
	Message    string   `json:"message,omitempty"`
	Note       string   `json:"note,omitempty"`
	By         string   `json:"requestedBy"`
	Records    []string `json:"matchedRecords,omitempty"`
	Blocking   []string `json:"blockingRecords,omitempty"`
	Selection  string   `json:"selection"`
	Target     string   `json:"target,omitempty"`
	Created    string   `json:"created"`
	Started    string   `json:"started"`
	Completed  string   `json:"completed"`
}

func newActionView(a *retryv1alpha1.DeadLetterAction) actionView {
	st := a.Status
	v := actionView{Name: a.Name, Queue: a.Spec.Queue, Action: string(a.Spec.Action), DryRun: a.Spec.Mode == retryv1alpha1.ActionModeDryRun,
		Phase: string(st.Phase), Matched: st.Matched, Done: st.Done, Skipped: st.Skipped, Failed: st.Failed, Note: a.Spec.Note,
		By: a.Spec.RequestedBy, Selection: describeSelector(a.Spec.Selector), Created: formatTime(a.CreationTimestamp),
		Started: formatTime(st.StartTime), Completed: formatTime(st.CompletionTime)}
	if v.Phase == "" {
		v.Phase = string(retryv1alpha1.ActionPending)
	}
	v.Finished = st.Phase == retryv1alpha1.ActionSucceeded || st.Phase == retryv1alpha1.ActionFailed
	handled := st.Done + st.Skipped + st.Failed
	switch {
	case st.Matched > 0:
		v.Percent = int(min(handled*100/st.Matched, 100))
	case v.Finished:
		v.Percent = 100
	}
	if v.Finished && st.Phase == retryv1alpha1.ActionSucceeded {
		v.Percent = 100
	}
	for _, c := range st.Conditions {
		if c.Type == retryv1alpha1.ConditionReady && c.Status != metav1.ConditionTrue {
			v.Message = c.Reason + ": " + c.Message
		}
	}
	if t := a.Spec.Target; t != nil {
		v.Target = "each to pipeline " + t.Pipeline + "'s first retry tier"
		if t.Topic != "" {
			v.Target = "to topic " + string(t.Topic)
		}
	}
	var why []string
	for _, r := range st.SkippedReasons {
		why = append(why, fmt.Sprintf("%s %d", r.Name, r.Count))
	}
	v.SkippedWhy = strings.Join(why, ", ")
	for _, r := range st.MatchedRecords {
		v.Records = append(v.Records, string(r))
	}
	for _, r := range st.BlockingRecords {
		v.Blocking = append(v.Blocking, string(r))
	}
	return v
}

// describeSelector words a selector: "reason max_retries_exceeded, record 0/42".
func describeSelector(s *retryv1alpha1.DeadLetterSelector) string {
	if s == nil {
		return "every dead letter of the queue"
	}
	var parts []string
	add := func(label string, vals []string) {
		if len(vals) > 0 {
			parts = append(parts, label+" "+strings.Join(vals, " or "))
		}
	}
	str := func(in []retryv1alpha1.DeadLetterName) []string {
		out := make([]string, 0, len(in))
		for _, x := range in {
			out = append(out, string(x))
		}
		return out
	}
	add("reason", str(s.Reasons))
	add("error type", str(s.ErrorTypes))
	add("pipeline", str(s.Pipelines))
	states := make([]string, 0, len(s.States))
	for _, x := range s.States {
		states = append(states, string(x))
	}
	add("state", states)
	if s.After != nil {
		parts = append(parts, "since "+formatTime(s.After))
	}
	if s.Before != nil {
		parts = append(parts, "before "+formatTime(s.Before))
	}
	recs := make([]string, 0, len(s.Records))
	for _, r := range s.Records {
		recs = append(recs, string(r))
	}
	add("record", recs)
	if len(parts) == 0 {
		return "every dead letter of the queue"
	}
	return strings.Join(parts, ", ")
}
