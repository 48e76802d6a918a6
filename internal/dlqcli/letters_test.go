package dlqcli

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// fakeLetters serves the deadletters API (list with labelSelector, fieldSelector since/until and the
// exact queue, reason, errorType and pipeline, limit and continue; get by name) from letters, and
// proxies every other request to the envtest API server as its administrator.
type fakeLetters struct {
	letters []dlv1.DeadLetter
	mu      sync.Mutex
	lists   []url.Values
}

func (f *fakeLetters) listRequests() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lists)
}

func (f *fakeLetters) serve(t *testing.T, e *envtestutil.Env) (kubeconfig string) {
	t.Helper()
	transport, err := rest.TransportFor(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(e.Config.Host)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	prefix := "/apis/" + dlv1.SchemeGroupVersion.String() + "/namespaces/"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok {
			proxy.ServeHTTP(w, r)
			return
		}
		parts := strings.Split(rest, "/") // NS/deadletters[/NAME]
		if len(parts) < 2 || parts[1] != dlv1.Resource {
			http.NotFound(w, r)
			return
		}
		if len(parts) == 3 {
			for i := range f.letters {
				if d := f.letters[i]; d.Namespace == parts[0] && d.Name == parts[2] {
					d.APIVersion, d.Kind = dlv1.SchemeGroupVersion.String(), dlv1.Kind
					writeJSON(w, http.StatusOK, d)
					return
				}
			}
			writeJSON(w, http.StatusNotFound, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: fmt.Sprintf("deadletters.%s %q not found", dlv1.GroupName, parts[2])})
			return
		}
		q := r.URL.Query()
		f.mu.Lock()
		f.lists = append(f.lists, q)
		f.mu.Unlock()
		sel, err := labels.Parse(q.Get("labelSelector"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var since, until time.Time
		fs, err := fields.ParseSelector(q.Get("fieldSelector"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The exact fields: several = of one field select any of them.
		exact := map[string][]string{}
		for _, req := range fs.Requirements() {
			if req.Field != dlv1.FieldSince && req.Field != dlv1.FieldUntil {
				exact[req.Field] = append(exact[req.Field], req.Value)
				continue
			}
			tm, err := time.Parse(time.RFC3339, req.Value)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			switch req.Field {
			case dlv1.FieldSince:
				since = tm
			case dlv1.FieldUntil:
				until = tm
			}
		}
		matchFields := func(d dlv1.DeadLetter) bool {
			for field, vals := range exact {
				v := map[string]string{dlv1.FieldQueue: d.Queue, dlv1.FieldReason: d.Reason, dlv1.FieldErrorType: d.ErrorType, dlv1.FieldPipeline: d.Pipeline}[field]
				if !slices.Contains(vals, v) {
					return false
				}
			}
			return true
		}
		start, _ := strconv.Atoi(q.Get("continue"))
		limit, _ := strconv.Atoi(q.Get("limit"))
		list := dlv1.DeadLetterList{TypeMeta: metav1.TypeMeta{APIVersion: dlv1.SchemeGroupVersion.String(), Kind: dlv1.ListKind}, Items: []dlv1.DeadLetter{}}
		for i := start; i < len(f.letters); i++ {
			d := f.letters[i]
			ts := d.CreationTimestamp.Time
			if d.Namespace != parts[0] || !sel.Matches(labels.Set(d.Labels)) || !matchFields(d) || (!since.IsZero() && ts.Before(since)) || (!until.IsZero() && !ts.Before(until)) {
				continue
			}
			if limit > 0 && len(list.Items) == limit {
				list.Continue = strconv.Itoa(i)
				break
			}
			list.Items = append(list.Items, d)
		}
		writeJSON(w, http.StatusOK, list)
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

var (
	reasons    = []string{"max_retries_exceeded", "non_retriable_error", "deadline_exceeded"}
	errorTypes = []string{"timeout", "HTTP 503", "ValidationError", "econnrefused"}
	pipes      = []string{"orders", "billing"}
)

// fixture makes n dead letters of queue in ns over two partitions, one a minute up to testNow,
// with reasons, error types, pipelines and states in turn, as the deadletters API labels them.
func fixture(ns, queue string, n int) []dlv1.DeadLetter {
	var out []dlv1.DeadLetter
	offsets := map[int32]int64{}
	for i := range n {
		p := int32(i % 2)
		off := offsets[p]
		offsets[p]++
		ts := testNow.Add(-time.Duration(n-i) * time.Minute)
		d := dlv1.DeadLetter{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s.%d.%d", queue, p, off), CreationTimestamp: metav1.NewTime(ts)},
			Queue:      queue, Topic: ns + "." + queue, Partition: p, Offset: off,
			Pipeline: ns + "/" + pipes[i%2], ConsumerGroup: "retryops." + ns + "." + pipes[i%2],
			Reason: reasons[i%3], ErrorType: errorTypes[i%4], ErrorMessage: fmt.Sprintf("delivery %d failed", i), HTTPStatus: 503, Attempts: 6,
			FirstFailureTime: ptr.To(metav1.NewTime(ts.Add(-time.Minute))), LastFailureTime: ptr.To(metav1.NewTime(ts)),
			Original: &dlv1.Original{Topic: "orders", Partition: p, Offset: int64(1000 + i)},
			Key:      &dlv1.Payload{Encoding: dlv1.EncodingText, Data: fmt.Sprintf("order-%d", i), Size: int64(len(fmt.Sprintf("order-%d", i)))},
			Value:    &dlv1.Payload{Encoding: dlv1.EncodingText, Data: fmt.Sprintf(`{"order":%d,"items":["a","b"]}`, i), Size: 30},
			Headers:  []dlv1.Header{{Name: "retryops.reason", Value: reasons[i%3], Encoding: dlv1.EncodingText}},
			State:    dlv1.DeadLetterStatus{State: dlv1.StatePending},
		}
		if i%5 == 0 {
			d.State = dlv1.DeadLetterStatus{State: dlv1.StateResolved, Note: "fixed by hand", RequestedBy: "alice", Time: ptr.To(metav1.NewTime(testNow)),
				Action: &dlv1.ActionRef{Namespace: ns, Name: "resolve-1"}}
		}
		d.Labels = dlv1.Labels(queue, d.Pipeline, d.Reason, d.ErrorType, d.State.State)
		out = append(out, d)
	}
	return out
}

// refs are the PARTITION/OFFSET of the dead letters that match.
func refs(letters []dlv1.DeadLetter, match func(d dlv1.DeadLetter) bool) []string {
	var out []string
	for _, d := range letters {
		if match(d) {
			out = append(out, fmt.Sprintf("%d/%d", d.Partition, d.Offset))
		}
	}
	return out
}

func csvRecords(g Gomega, s string) [][]string {
	records, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(records[0]).To(Equal(LetterColumns))
	return records[1:]
}

func csvRefs(records [][]string) []string {
	out := []string{}
	for _, r := range records {
		out = append(out, r[1]+"/"+r[2])
	}
	return out
}

// list, show and export read the deadletters API: the filters become label and field selectors, the
// pages are followed, and every format prints what an independent scan of the dead letters finds.
func TestListShowExport(t *testing.T) {
	e := startEnv(t)
	q := namespaceWithQueue(t, e, "letters", "orders-dlq")
	q.Status.Messages = ptr.To[int64](1100)
	NewWithT(t).Expect(e.Client.Status().Update(context.Background(), q)).To(Succeed())
	f := &fakeLetters{letters: fixture("letters", "orders-dlq", 1100)}
	kubeconfig := f.serve(t, e)
	run := func(t *testing.T, terminal bool, args ...string) result {
		t.Helper()
		return <-startPlugin(t, kubeconfig, testNow, terminal, &syncBuffer{}, append([]string{"-n", "letters"}, args...)...)
	}
	all := func(dlv1.DeadLetter) bool { return true }

	t.Run("each filter equals an independent scan", func(t *testing.T) {
		rfc := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
		for _, tc := range []struct {
			args           []string
			fields, labels string
			match          func(d dlv1.DeadLetter) bool
		}{
			{nil, "queue=orders-dlq", "", all},
			{[]string{"--reason", "deadline_exceeded"}, "queue=orders-dlq,reason=deadline_exceeded", "",
				func(d dlv1.DeadLetter) bool { return d.Reason == "deadline_exceeded" }},
			{[]string{"--error-type", "HTTP 503,timeout"}, "queue=orders-dlq,errorType=HTTP 503,errorType=timeout", "",
				func(d dlv1.DeadLetter) bool { return d.ErrorType == "HTTP 503" || d.ErrorType == "timeout" }},
			{[]string{"--pipeline", "letters/billing"}, "queue=orders-dlq,pipeline=letters/billing", "",
				func(d dlv1.DeadLetter) bool { return d.Pipeline == "letters/billing" }},
			{[]string{"--state", "resolved"}, "queue=orders-dlq", dlv1.LabelState + "=Resolved",
				func(d dlv1.DeadLetter) bool { return d.State.State == dlv1.StateResolved }},
			{[]string{"--since", "2h", "--until", "30m"}, "queue=orders-dlq,since=" + rfc(testNow.Add(-2*time.Hour)) + ",until=" + rfc(testNow.Add(-30*time.Minute)), "",
				func(d dlv1.DeadLetter) bool {
					ts := d.CreationTimestamp.Time
					return !ts.Before(testNow.Add(-2*time.Hour)) && ts.Before(testNow.Add(-30*time.Minute))
				}},
			{[]string{"--reason", "max_retries_exceeded", "--state", "Pending", "--pipeline", "orders", "--since", "2026-11-23T00:00:00Z"},
				"queue=orders-dlq,reason=max_retries_exceeded,pipeline=letters/orders,since=2026-11-23T00:00:00Z", dlv1.LabelState + "=Pending",
				func(d dlv1.DeadLetter) bool {
					return d.Reason == "max_retries_exceeded" && d.State.State == dlv1.StatePending && d.Pipeline == "letters/orders" &&
						!d.CreationTimestamp.Before(ptr.To(metav1.NewTime(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC))))
				}},
		} {
			t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
				g := NewWithT(t)
				before := len(f.listRequests())
				r := run(t, false, append([]string{"list", "orders-dlq", "--limit", "0", "-o", "csv"}, tc.args...)...)
				g.Expect(r.code).To(Equal(ExitOK), r.stderr)
				want := refs(f.letters, tc.match)
				g.Expect(csvRefs(csvRecords(g, r.stdout))).To(Equal(want))
				reqs := f.listRequests()[before:]
				g.Expect(reqs).To(HaveLen(max(1, (len(want)+pageSize-1)/pageSize)), "one request per page of %d", pageSize)
				for _, q := range reqs {
					g.Expect(q.Get("fieldSelector")).To(Equal(tc.fields))
					g.Expect(q.Get("labelSelector")).To(Equal(tc.labels))
					g.Expect(q.Get("limit")).To(Equal("500"))
				}
			})
		}
	})

	t.Run("a table of the first few, and a word that more match", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, false, "list", "orders-dlq", "--reason", "non_retriable_error", "--limit", "3")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(Equal(`DEAD LETTER   AGE   STATE     REASON                ERROR TYPE     PIPELINE          ATTEMPTS   KEY
1/0           18h   Pending   non_retriable_error   HTTP 503       letters/billing   6          order-1
0/2           18h   Pending   non_retriable_error   timeout        letters/orders    6          order-4
1/3           18h   Pending   non_retriable_error   econnrefused   letters/billing   6          order-7
`))
		g.Expect(r.stderr).To(Equal("(showing the first 3; more match: raise --limit, or use export)\n"))
		wide := run(t, false, "list", "orders-dlq", "--limit", "1", "-o", "wide", "--no-headers")
		g.Expect(wide.stdout).To(Equal("0/0   18h   Resolved   max_retries_exceeded   timeout   letters/orders   6     order-0   503   orders/0/1000   delivery 0 failed\n"))
		names := run(t, false, "list", "orders-dlq", "--limit", "2", "-o", "name")
		g.Expect(names.stdout).To(Equal("deadletter.deadletters.retryops.dev/orders-dlq.0.0\ndeadletter.deadletters.retryops.dev/orders-dlq.1.0\n"))
		none := run(t, false, "list", "orders-dlq", "--reason", "no_such_reason")
		g.Expect(none.code).To(Equal(ExitOK))
		g.Expect(none.stdout).To(BeEmpty())
		g.Expect(none.stderr).To(Equal("No dead letters found in letters/orders-dlq.\n"))
	})

	t.Run("show", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, false, "show", "orders-dlq", "0/0")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(Equal(`Dead letter:    orders-dlq 0/0 (topic letters.orders-dlq, namespace letters)
Dead-lettered:  2026-11-22T17:40:00Z (18h ago)
State:          Resolved by alice at 2026-11-23T12:00:00Z (action resolve-1)
Note:           fixed by hand
Reason:         max_retries_exceeded
Error type:     timeout (HTTP 503)
Error:          delivery 0 failed
Pipeline:       letters/orders (consumer group retryops.letters.orders)
Attempts:       6 (first failure 2026-11-22T17:39:00Z, last 2026-11-22T17:40:00Z)
Original:       orders/0/1000
Key:            order-0
Headers:
  retryops.reason: max_retries_exceeded
Value (30 bytes, JSON):
{
  "order": 0,
  "items": [
    "a",
    "b"
  ]
}
`))
		js := run(t, false, "show", "orders-dlq", "1/7", "-o", "json")
		got := dlv1.DeadLetter{}
		g.Expect(json.Unmarshal([]byte(js.stdout), &got)).To(Succeed())
		g.Expect(got.Name).To(Equal("orders-dlq.1.7"))
		g.Expect(got.Kind).To(Equal("DeadLetter"))

		missing := run(t, false, "show", "orders-dlq", "0/99999")
		g.Expect(missing.code).To(Equal(ExitNotFound))
		g.Expect(missing.stderr).To(Equal("error: dead letter 0/99999 not found in queue letters/orders-dlq (kubectl dlq list orders-dlq shows what it holds)\n"))
		noQueue := run(t, false, "show", "payments-dlq", "0/1")
		g.Expect(noQueue.code).To(Equal(ExitNotFound))
		g.Expect(noQueue.stderr).To(ContainSubstring(`deadletterqueues.retry.retryops.dev "payments-dlq" in namespace "letters" not found`))
	})

	t.Run("export csv to a file parses into the same rows, with a progress bar on a terminal", func(t *testing.T) {
		g := NewWithT(t)
		file := filepath.Join(t.TempDir(), "orders.csv")
		stderr := &syncBuffer{}
		r := <-startPlugin(t, kubeconfig, testNow, true, stderr, "-n", "letters", "export", "orders-dlq", "-o", "csv", "--file", file)
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(BeEmpty())
		g.Expect(r.stderr).To(ContainSubstring("[██████████████████████████████] 100%  1100/1100  exporting\n"))
		g.Expect(r.stderr).To(HaveSuffix("1100 dead letters written to " + file + "\n"))
		data, err := os.ReadFile(file)
		g.Expect(err).NotTo(HaveOccurred())
		records := csvRecords(g, string(data))
		g.Expect(records).To(HaveLen(len(f.letters)))
		for i, d := range f.letters {
			row := map[string]string{}
			for j, c := range LetterColumns {
				row[c] = records[i][j]
			}
			g.Expect(row).To(Equal(map[string]string{
				"queue": "orders-dlq", "partition": strconv.Itoa(int(d.Partition)), "offset": strconv.FormatInt(d.Offset, 10),
				"timestamp": d.CreationTimestamp.UTC().Format(time.RFC3339), "state": string(d.State.State), "reason": d.Reason,
				"errorType": d.ErrorType, "errorMessage": d.ErrorMessage, "httpStatus": "503", "attempts": "6", "pipeline": d.Pipeline,
				"consumerGroup": d.ConsumerGroup, "originalTopic": "orders", "originalPartition": strconv.Itoa(int(d.Partition)),
				"originalOffset": strconv.FormatInt(d.Original.Offset, 10), "firstFailureTime": d.FirstFailureTime.UTC().Format(time.RFC3339),
				"lastFailureTime": d.LastFailureTime.UTC().Format(time.RFC3339), "replayCount": "0", "key": d.Key.Data, "keyEncoding": "text",
				"value": d.Value.Data, "valueEncoding": "text", "valueTruncated": "false",
				"headers":   `[{"name":"retryops.reason","value":"` + d.Reason + `","encoding":"text"}]`,
				"stateNote": d.State.Note, "stateRequestedBy": d.State.RequestedBy, "stateTime": map[bool]string{true: "2026-11-23T12:00:00Z"}[d.State.Time != nil],
			}), "row %d", i)
		}
	})

	t.Run("export json is a DeadLetterList of the selection", func(t *testing.T) {
		g := NewWithT(t)
		r := run(t, false, "export", "orders-dlq", "-o", "json", "--state", "Resolved")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stderr).To(BeEmpty())
		list := dlv1.DeadLetterList{}
		g.Expect(json.NewDecoder(bytes.NewReader([]byte(r.stdout))).Decode(&list)).To(Succeed())
		g.Expect(list.Kind).To(Equal("DeadLetterList"))
		want := refs(f.letters, func(d dlv1.DeadLetter) bool { return d.State.State == dlv1.StateResolved })
		g.Expect(refs(list.Items, all)).To(Equal(want))
		g.Expect(list.Items[0].Value.Data).To(Equal(f.letters[0].Value.Data))
		g.Expect(run(t, false, "export", "orders-dlq").code).To(Equal(ExitUsage))
	})
}
