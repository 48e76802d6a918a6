package dispatcher_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

// fate is where a record of the hostile batch must end: "delivered", "tier" or "dlq", with the
// error type its tier or dead-letter record carries.
type hostileFate struct{ where, errorType string }

// TestBatchHostileAnswersThroughTheEngine: the engine with the HTTP sink as its BatchHandler,
// against a sink answering its batch of records a and b wrongly. No record the sink did not plainly
// accept is committed as delivered: each goes to its retry tier (the policy retries 5xx, so the
// 502 of a missing result or an unreadable answer) or to the dead letter queue (its default for a
// failure without a status) with the error type naming what was wrong; the source offsets are
// committed once those records are written; the problem is counted and logged once, as counts.
func TestBatchHostileAnswersThroughTheEngine(t *testing.T) {
	ok := func(id string) string { return `{"id":"` + id + `","status":"success"}` }
	doc := func(results ...string) string {
		return `{"version":"retryops.dev/batch/v1","results":[` + strings.Join(results, ",") + `]}`
	}
	cases := []struct {
		name    string
		answer  func(w http.ResponseWriter, ids []string)
		a, b    hostileFate
		problem string
	}{
		{name: "an id not in the request", problem: metrics.ProblemUnknownID,
			answer: func(w http.ResponseWriter, ids []string) { write200(w, doc(ok(ids[0]+"x"), ok(ids[1]))) },
			a:      hostileFate{"tier", batch.ErrorTypeResultMissing}, b: hostileFate{where: "delivered"}},
		{name: "a duplicated id that agrees", problem: metrics.ProblemDuplicateID,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, doc(ok(ids[0]), ok(ids[0]), `{"id":"`+ids[1]+`","status":"failure","httpStatus":503,"errorType":"Busy"}`))
			},
			a: hostileFate{where: "delivered"}, b: hostileFate{"tier", "Busy"}},
		{name: "a duplicated id that conflicts", problem: metrics.ProblemConflictingID,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, doc(ok(ids[0]), `{"id":"`+ids[0]+`","status":"failure","httpStatus":500}`, ok(ids[1])))
			},
			a: hostileFate{"tier", batch.ErrorTypeResultConflict}, b: hostileFate{where: "delivered"}},
		{name: "a huge body", problem: metrics.ProblemTooLarge,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, doc(ok(ids[0]), ok(ids[1]), `{"id":"pad","status":"success","message":"`+strings.Repeat("x", 2<<20)+`"}`))
			},
			a: hostileFate{"tier", batch.ErrorTypeResponseTooLarge}, b: hostileFate{"tier", batch.ErrorTypeResponseTooLarge}},
		{name: "invalid JSON", problem: metrics.ProblemInvalid,
			answer: func(w http.ResponseWriter, ids []string) { write200(w, doc(ok(ids[0]), ok(ids[1]))[:40]) },
			a:      hostileFate{"tier", batch.ErrorTypeResponseInvalid}, b: hostileFate{"tier", batch.ErrorTypeResponseInvalid}},
		{name: "another version", problem: metrics.ProblemInvalid,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, strings.Replace(doc(ok(ids[0]), ok(ids[1])), "batch/v1", "batch/v2", 1))
			},
			a: hostileFate{"tier", batch.ErrorTypeResponseInvalid}, b: hostileFate{"tier", batch.ErrorTypeResponseInvalid}},
		{name: "a status outside 100-599", problem: metrics.ProblemInvalidStatus,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, doc(`{"id":"`+ids[0]+`","status":"failure","httpStatus":999}`, ok(ids[1])))
			},
			a: hostileFate{"tier", batch.ErrorTypeInvalidStatus}, b: hostileFate{where: "delivered"}},
		{name: "a success with a 5xx status", problem: metrics.ProblemInvalidStatus,
			answer: func(w http.ResponseWriter, ids []string) {
				write200(w, doc(`{"id":"`+ids[0]+`","status":"success","httpStatus":503}`, ok(ids[1])))
			},
			a: hostileFate{"tier", batch.ErrorTypeInvalidStatus}, b: hostileFate{where: "delivered"}},
		{name: "a 415 refusing batches, under a policy dead-lettering 4xx", problem: metrics.ProblemNotSupported,
			answer: func(w http.ResponseWriter, _ []string) {
				http.Error(w, "no batches here", http.StatusUnsupportedMediaType)
			},
			a: hostileFate{"tier", batch.ErrorTypeNotSupported}, b: hostileFate{"tier", batch.ErrorTypeNotSupported}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPipeline(t, fmt.Sprintf("batchhostile%d", i), 1, simplePolicy(3, time.Hour), nil)
			batchConfig(p, 2, 1<<20, 10*time.Second) // sent when full: the fake clock never reaches maxWait
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				req, err := batch.ParseRequest(r, 1<<20)
				if err != nil || len(req.Records) != 2 {
					t.Errorf("the sink read %+v, %v; want a batch of a and b", req, err)
					http.Error(w, "unexpected", http.StatusBadRequest)
					return
				}
				c.answer(w, []string{req.Records[0].ID, req.Records[1].ID})
			}))
			t.Cleanup(srv.Close)
			fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
			sink := dispatcher.NewHTTPSink(srv.URL, 4, dispatcher.WithSinkClock(fc))
			reg := prometheus.NewRegistry()
			var logs syncbuf.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			start(t, dispatcher.Options{Config: p.cfg, Handler: sink, BatchHandler: sink, Clock: fc, Registerer: reg, Logger: log})

			dt.Produce(t, p.prod, sourceRecords(p, "a", "b")...)
			dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 2 }, "the batch committed")
			// Committed: the tier and dead-letter writes are done (TestBatchCommitsAfterWrites), so
			// they are all there to read now.
			got := map[string]hostileFate{"a": {where: "delivered"}, "b": {where: "delivered"}}
			for where, topic := range map[string]string{"tier": p.cfg.Topics.Retries[0].Name, "dlq": p.cfg.Topics.DeadLetter} {
				for _, r := range allRecords(t, p, topic) {
					et, _ := dt.Header(r, headers.ErrorType)
					got[string(r.Value)] = hostileFate{where, et}
				}
			}
			if got["a"] != c.a || got["b"] != c.b {
				t.Errorf("a %+v, b %+v; want %+v, %+v", got["a"], got["b"], c.a, c.b)
			}
			if n := counterLabel(t, reg, metrics.BatchAnswerProblemsTotal, metrics.LabelProblem, c.problem); n != 1 {
				t.Errorf("%s{problem=%s} = %v, want 1", metrics.BatchAnswerProblemsTotal, c.problem, n)
			}
			if n := strings.Count(logs.String(), `"`+c.problem+`":1`); n != 1 {
				t.Errorf("%d log lines counting %s, want 1:\n%s", n, c.problem, logs.String())
			}
			if strings.Contains(logs.String(), `"id"`) {
				t.Errorf("the log names an id:\n%s", logs.String())
			}
		})
	}
}

func write200(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", batch.MediaType)
	_, _ = w.Write([]byte(body))
}

// counterLabel returns the counter name's series whose label has value, -1 when there is none.
func counterLabel(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
