package dispatcher_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestDeliverBatchHostileAnswers: whatever a 2xx answer holds, a record succeeds only when the
// answer plainly says so, and every other record fails with the type naming what was wrong.
func TestDeliverBatchHostileAnswers(t *testing.T) {
	const v = `"version":"retryops.dev/batch/v1"`
	huge := `{` + v + `,"results":[{"id":"0","status":"success","message":"` + strings.Repeat("x", int(batch.ResponseLimit(3))) + `"}]}`
	cases := []struct {
		name    string
		body    string
		success map[int]bool
		types   map[int]string // error type of each failed record; "*" for all
	}{
		{name: "ids not in the request", body: `{` + v + `,"results":[{"id":"7","status":"success"},{"id":"00","status":"success"},{"id":" 0","status":"success"}]}`,
			types: map[int]string{-1: batch.ErrorTypeResultMissing}},
		{name: "duplicated ids that agree", body: `{` + v + `,"results":[{"id":"0","status":"success"},{"id":"0","status":"success"},{"id":"1","status":"success"},{"id":"2","status":"success"}]}`,
			success: map[int]bool{0: true, 1: true, 2: true}},
		{name: "duplicated ids that disagree", body: `{` + v + `,"results":[{"id":"0","status":"success"},{"id":"0","status":"failure","httpStatus":500},{"id":"1","status":"success"},{"id":"1","status":"success"}]}`,
			success: map[int]bool{1: true}, types: map[int]string{0: batch.ErrorTypeResultConflict, 2: batch.ErrorTypeResultMissing}},
		{name: "a huge body", body: huge, types: map[int]string{-1: batch.ErrorTypeResponseTooLarge}},
		{name: "invalid JSON", body: `{` + v + `,"results":[{"id":"0","status":"success"}`, types: map[int]string{-1: batch.ErrorTypeResponseInvalid}},
		{name: "an empty body", body: ``, types: map[int]string{-1: batch.ErrorTypeResponseInvalid}},
		{name: "no version", body: `{"results":[{"id":"0","status":"success"}]}`, types: map[int]string{-1: batch.ErrorTypeResponseInvalid}},
		{name: "another version", body: `{"version":"retryops.dev/batch/v2","results":[{"id":"0","status":"success"}]}`, types: map[int]string{-1: batch.ErrorTypeResponseInvalid}},
		{name: "statuses outside 100-599", body: `{` + v + `,"results":[{"id":"0","status":"success","httpStatus":700},{"id":"1","status":"failure","httpStatus":99},{"id":"2","status":"failure","httpStatus":"503"}]}`,
			types: map[int]string{-1: batch.ErrorTypeInvalidStatus}},
		{name: "a success with a failure's status", body: `{` + v + `,"results":[{"id":"0","status":"success","httpStatus":503},{"id":"1","status":"ok"},{"id":"2","status":"SUCCESS"}]}`,
			types: map[int]string{0: batch.ErrorTypeInvalidStatus, 1: batch.ErrorTypeResponseInvalid, 2: batch.ErrorTypeResponseInvalid}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, echoIDs(t, r, c.body))
			})
			got := sink.DeliverBatch(context.Background(), batchDeliveries(3))
			if len(got) != 3 {
				t.Fatalf("%d results, want 3", len(got))
			}
			for i, res := range got {
				if res.Success != c.success[i] {
					t.Errorf("record %d: success %v, want %v (%+v)", i, res.Success, c.success[i], res)
				}
				if res.Success {
					continue
				}
				want, ok := c.types[i]
				if !ok {
					want = c.types[-1]
				}
				if res.Undeliverable || res.Outcome.ErrorType != want || res.Outcome.Message == "" {
					t.Errorf("record %d: %+v, want a failure %s with a message, not undeliverable", i, res, want)
				}
			}
		})
	}
}

// doneContext is a context whose deadline the test declares passed by closing done: a timeout
// without a wall-clock wait.
type doneContext struct {
	context.Context
	done chan struct{}
}

func (c *doneContext) Done() <-chan struct{} { return c.done }

func (c *doneContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestDeliverBatchTimeout: an attempt timeout while the sink holds the batch fails every record
// as a transport timeout.
func TestDeliverBatchTimeout(t *testing.T) {
	got, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
		close(got)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	ctx := &doneContext{Context: context.Background(), done: make(chan struct{})}
	go func() {
		<-got
		close(ctx.done)
	}()
	for i, res := range sink.DeliverBatch(ctx, batchDeliveries(3)) {
		if res.Success || res.Outcome.Transport != retry.TransportTimeout {
			t.Errorf("record %d: %+v, want a transport timeout", i, res)
		}
	}
}

// TestDeliverBatchBrokenConnection: a connection closed before the answer, or in the middle of a
// 2xx answer's body, fails every record as a broken connection, not as an invalid answer.
func TestDeliverBatchBrokenConnection(t *testing.T) {
	for name, raw := range map[string]string{
		"before the answer":      "",
		"in the answer's body":   "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{\"version\":\"retryops.dev/batch/v1\",\"results\":[{\"id\":\"0\",\"status\":\"success\"}",
		"in the answer's header": "HTTP/1.1 200 OK\r\nContent-Le",
	} {
		t.Run(name, func(t *testing.T) {
			sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				_, _ = buf.WriteString(raw)
				_ = buf.Flush()
				_ = conn.Close()
			})
			for i, res := range sink.DeliverBatch(context.Background(), batchDeliveries(3)) {
				if res.Success || res.Outcome.Transport != retry.TransportConnectionReset {
					t.Errorf("record %d: %+v, want a broken connection", i, res)
				}
			}
		})
	}
}

// TestDeliverBatchNotResent: a batch the sink read on a reused connection and never answered is a
// transport failure of every record, not a second copy net/http sends by itself.
func TestDeliverBatchNotResent(t *testing.T) {
	srv := newDropSecond(t)
	sink := dispatcher.NewHTTPSink("http://"+srv.ln.Addr().String(), 1)
	first := sink.DeliverBatch(context.Background(), batchDeliveries(2)) // 204: no document
	for i, res := range first {
		if res.Success || res.Outcome.ErrorType != batch.ErrorTypeResponseInvalid {
			t.Errorf("first batch, record %d: %+v, want %s", i, res, batch.ErrorTypeResponseInvalid)
		}
	}
	for i, res := range sink.DeliverBatch(context.Background(), batchDeliveries(2)) {
		if res.Success || res.Outcome.Transport == retry.TransportNone {
			t.Errorf("second batch, record %d: %+v, want a transport failure", i, res)
		}
	}
	if n := srv.count(""); n != 2 {
		t.Errorf("the sink read %d batch requests, want 2 (no silent resend)", n)
	}
}
