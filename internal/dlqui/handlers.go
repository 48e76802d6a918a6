package dlqui

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// pageSize is how many dead letters the queue browser shows at once.
const pageSize = 25

// states are the dead-letter states, in the order the filters offer them.
var states = []string{string(dlv1.StatePending), string(dlv1.StateReplayed), string(dlv1.StateResolved), string(dlv1.StateIgnored)}

func (s *Server) routes() {
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFiles())))
	s.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, staticFiles(), "favicon.svg")
	})
	s.mux.HandleFunc("GET /{$}", s.overview)
	s.mux.HandleFunc("GET /queues/{queue}", s.queue)
	s.mux.HandleFunc("GET /queues/{queue}/letters/{partition}/{offset}", s.letter)
	s.mux.HandleFunc("POST /queues/{queue}/actions", s.preview)
	s.mux.HandleFunc("GET /actions", s.actions)
	s.mux.HandleFunc("GET /actions/{name}", s.action)
	s.mux.HandleFunc("POST /actions/{name}/run", s.run)
	s.mux.HandleFunc("GET /api/actions/{name}", s.actionJSON)
}

// page is what every template gets besides its own data.
type page struct {
	// Base is the console's path, /<random>/: every link starts with it.
	Base      string
	Title     string
	Namespace string
	Nav       string
	CSRF      string
	PollMs    int64
	Data      any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	_ = pages[name].ExecuteTemplate(w, "layout.html", page{Base: s.base, Title: title, Namespace: s.backend.Namespace(), Nav: nav,
		CSRF: s.token, PollMs: s.poll.Milliseconds(), Data: data})
}

// errorPage says what failed, with the API server's status code when it refused.
type errorPage struct {
	Message string
	Hint    string
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, hint := http.StatusBadGateway, ""
	var bad *badRequest
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &bad):
		code = http.StatusBadRequest
	case apierrors.IsNotFound(err):
		code = http.StatusNotFound
	case apierrors.IsForbidden(err):
		code, hint = http.StatusForbidden, "Your kubeconfig identity lacks the RBAC permission: ask for it, or run kubectl dlq ui with another --context or --namespace."
	case apierrors.IsUnauthorized(err):
		code, hint = http.StatusUnauthorized, "The API server does not know you: check your kubeconfig credentials."
	case errors.As(err, &status):
		code = int(status.Status().Code)
	}
	s.render(w, r, code, "error", http.StatusText(code), "", errorPage{Message: err.Error(), Hint: hint})
}

// badRequest is a wrong form or query value.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

type overviewData struct {
	Queues []queueView
	// Running are the actions not finished yet.
	Running []actionView
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	qs, err := s.backend.ListQueues(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	slices.SortFunc(qs, func(a, b retryv1alpha1.DeadLetterQueue) int { return strings.Compare(a.Name, b.Name) })
	d := overviewData{}
	for i := range qs {
		d.Queues = append(d.Queues, newQueueView(&qs[i], s.samples.record(&qs[i])))
	}
	if as, err := s.backend.ListActions(r.Context()); err == nil {
		for i := range as {
			if v := newActionView(&as[i]); !v.Finished {
				d.Running = append(d.Running, v)
			}
		}
	}
	s.render(w, r, http.StatusOK, "overview", "Dead-letter queues", "overview", d)
}

// filterForm is the queue browser's filter as the form shows it.
type filterForm struct {
	Reason, ErrorType, Pipeline, State, Since, Until string
}

// parseFilter reads the filter from a query or form: reason, error_type, pipeline, state (any of
// several each), since and until (a datetime-local value in UTC, a date, or RFC 3339). Reasons,
// error types and pipelines are kept as written: they are values from the page's lists, which a
// producer may have written with blanks, and the plugin takes them so too.
func parseFilter(v url.Values) (Filter, filterForm, error) {
	var f Filter
	vals := func(k string, trim bool) []string {
		var out []string
		for _, x := range v[k] {
			if trim {
				x = strings.TrimSpace(x)
			}
			if x != "" {
				out = append(out, x)
			}
		}
		return out
	}
	f.Reasons, f.ErrorTypes, f.Pipelines, f.States = vals("reason", false), vals("error_type", false), vals("pipeline", false), vals("state", true)
	for _, st := range f.States {
		if !slices.Contains(states, st) {
			return f, filterForm{}, &badRequest{"state " + strconv.Quote(st) + ": want one of " + strings.Join(states, ", ")}
		}
	}
	var err error
	if f.Since, err = parseFormTime("since", v.Get("since")); err != nil {
		return f, filterForm{}, err
	}
	if f.Until, err = parseFormTime("until", v.Get("until")); err != nil {
		return f, filterForm{}, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, filterForm{}, &badRequest{"since must be before until"}
	}
	first := func(xs []string) string {
		if len(xs) == 0 {
			return ""
		}
		return xs[0]
	}
	form := filterForm{Reason: first(f.Reasons), ErrorType: first(f.ErrorTypes), Pipeline: first(f.Pipelines), State: first(f.States),
		Since: formTime(f.Since), Until: formTime(f.Until)}
	return f, form, nil
}

func parseFormTime(name, s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, &badRequest{name + " " + strconv.Quote(s) + ": want a time such as 2026-11-23T10:00 (UTC)"}
}

// formTime is t as a datetime-local value (UTC).
func formTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04")
}

// filterQuery is f as query parameters, for links and hidden form fields.
func filterQuery(f Filter) url.Values {
	v := url.Values{}
	v["reason"], v["error_type"], v["pipeline"], v["state"] = f.Reasons, f.ErrorTypes, f.Pipelines, f.States
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339))
	}
	for k, x := range v {
		if len(x) == 0 {
			delete(v, k)
		}
	}
	return v
}

type queueData struct {
	Queue      queueView
	Form       filterForm
	Filtered   bool
	Hidden     []hiddenField
	Options    filterOptions
	Letters    []letterRow
	Next       string
	First      string
	More       int64
	Page       int
	Selection  string
	CanPurge   bool
	PurgeUntil string
}

type hiddenField struct{ Name, Value string }

type filterOptions struct {
	Reasons, ErrorTypes, States []string
	Pipelines                   []pipelineOption
}

// pipelineOption is a counted pipeline in the filter's list: Value, the pipeline whole, is what
// choosing it filters on; Text is its short name. A pipeline without '/' (a producer's header) is
// Disabled: a filter takes a bare name for the namespace's pipeline of that name.
type pipelineOption struct {
	Value, Text        string
	Selected, Disabled bool
}

// pipelineOptions are the pipelines counted in cs, as the queue page offers them to filter on,
// chosen the one the filter names.
func pipelineOptions(namespace string, cs []retryv1alpha1.NamedCount, chosen string) []pipelineOption {
	out := make([]pipelineOption, 0, len(cs))
	for _, p := range names(cs) {
		o := pipelineOption{Value: p, Text: ShortPipeline(namespace, p)}
		if !strings.Contains(p, "/") {
			o.Disabled, o.Text = true, p+" (no namespace: choose its dead letters by partition/offset)"
		}
		o.Selected = !o.Disabled && chosen != "" && QualifiedPipeline(namespace, chosen) == p
		out = append(out, o)
	}
	return out
}

type letterRow struct {
	Ref, Link, Time, Reason, ErrorType, Pipeline, State, Key string
	Attempts                                                 int32
}

// names are the names counted in cs, sorted, each once.
func names(cs []retryv1alpha1.NamedCount) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	q, err := s.backend.GetQueue(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, form, err := parseFilter(r.URL.Query())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list, err := s.backend.ListLetters(r.Context(), name, f, pageSize, r.URL.Query().Get("continue"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pageNo, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pageNo = max(pageNo, 1)
	fq := filterQuery(f)
	d := queueData{Queue: newQueueView(q, s.samples.record(q)), Form: form, Filtered: !f.Empty(), Page: pageNo,
		Options: filterOptions{Reasons: names(q.Status.Reasons), ErrorTypes: names(q.Status.ErrorTypes),
			Pipelines: pipelineOptions(s.backend.Namespace(), q.Status.Pipelines, form.Pipeline), States: states},
		Selection: describeSelector(selectorOrNil(f, s.backend.Namespace())),
		CanPurge:  ActionRequest{Kind: retryv1alpha1.DeadLetterPurge, Filter: f}.Check() == nil}
	for k, vs := range fq {
		for _, v := range vs {
			d.Hidden = append(d.Hidden, hiddenField{Name: k, Value: v})
		}
	}
	slices.SortFunc(d.Hidden, func(a, b hiddenField) int { return strings.Compare(a.Name+a.Value, b.Name+b.Value) })
	d.First = s.path("/queues/" + url.PathEscape(name) + "?" + fq.Encode())
	if list.Continue != "" {
		nq := filterQuery(f)
		nq.Set("continue", list.Continue)
		nq.Set("page", strconv.Itoa(pageNo+1))
		d.Next = s.path("/queues/" + url.PathEscape(name) + "?" + nq.Encode())
	}
	if list.RemainingItemCount != nil {
		d.More = *list.RemainingItemCount
	}
	for i := range list.Items {
		row := newLetterRow(name, &list.Items[i])
		row.Link = s.path(row.Link)
		d.Letters = append(d.Letters, row)
	}
	s.render(w, r, http.StatusOK, "queue", "Queue "+name, "queue", d)
}

func selectorOrNil(f Filter, ns string) *retryv1alpha1.DeadLetterSelector {
	if f.Empty() {
		return nil
	}
	sel := f.Selector(ns)
	return &sel
}

func newLetterRow(queue string, l *dlv1.DeadLetter) letterRow {
	ref := strconv.Itoa(int(l.Partition)) + "/" + strconv.FormatInt(l.Offset, 10)
	row := letterRow{Ref: ref, Link: "/queues/" + url.PathEscape(queue) + "/letters/" + ref, Time: formatTime(l.CreationTimestamp),
		Reason: l.Reason, ErrorType: l.ErrorType, Pipeline: l.Pipeline, State: string(l.State.State), Attempts: l.Attempts}
	if l.Key != nil {
		row.Key = l.Key.Data
		if l.Key.Encoding == dlv1.EncodingBase64 {
			row.Key = "(binary, " + strconv.FormatInt(l.Key.Size, 10) + " bytes)"
		} else if len(row.Key) > 40 {
			row.Key = row.Key[:40] + "…"
		}
	}
	return row
}

type letterData struct {
	Queue  string
	Ref    string
	Letter *dlv1.DeadLetter
	Key    *payloadView
	Value  *payloadView
	Back   string
	Action string
}

func (s *Server) letter(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	p, err1 := strconv.ParseInt(r.PathValue("partition"), 10, 32)
	off, err2 := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if err1 != nil || err2 != nil || p < 0 || off < 0 {
		s.fail(w, r, &badRequest{"a dead letter is PARTITION/OFFSET, two non-negative numbers"})
		return
	}
	l, err := s.backend.GetLetter(r.Context(), queue, int32(p), off)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d := letterData{Queue: queue, Ref: strconv.FormatInt(p, 10) + "/" + strconv.FormatInt(off, 10), Letter: l,
		Key: newPayloadView(l.Key), Value: newPayloadView(l.Value), Back: s.path("/queues/" + url.PathEscape(queue))}
	if a := l.State.Action; a != nil && a.Namespace == s.backend.Namespace() {
		d.Action = s.path("/actions/" + url.PathEscape(a.Name))
	}
	s.render(w, r, http.StatusOK, "letter", "Dead letter "+d.Ref+" of "+queue, "queue", d)
}

// asStatus finds an API status in err's chain.
func asStatus(err error, st *interface{ Status() metav1.Status }) bool {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		*st = s
		return true
	}
	return false
}
