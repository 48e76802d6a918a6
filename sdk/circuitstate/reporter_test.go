package circuitstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

const (
	testNS   = "ns"
	testCM   = "c"
	testPod  = "pod-a"
	otherVal = "keep me"
	waitFor  = 3 * time.Second
)

// logRecords returns the JSON log records written to logs so far.
func logRecords(t *testing.T, logs *syncbuf.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// fakeConfigMaps is one ConfigMap of the namespace: merge patches applied to its data, each
// recorded, and hooks that run before a patch (first added, first run) and may fail it.
type fakeConfigMaps struct {
	mu      sync.Mutex
	data    map[string]string
	patches [][]byte
	hooks   []func() error
}

func (f *fakeConfigMaps) MergePatch(_ context.Context, name string, patch []byte, fieldManager string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.patches = append(f.patches, append([]byte(nil), patch...))
	if name != testCM || fieldManager != FieldManager {
		return fmt.Errorf("patched ConfigMap %q as %q, want %q as %q", name, fieldManager, testCM, FieldManager)
	}
	for _, h := range f.hooks {
		if err := h(); err != nil {
			return err
		}
	}
	var p struct {
		Data map[string]*string `json:"data"`
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return err
	}
	for k, v := range p.Data {
		if v == nil {
			delete(f.data, k)
		} else {
			f.data[k] = *v
		}
	}
	return nil
}

func (f *fakeConfigMaps) hook(h func() error) {
	f.mu.Lock()
	f.hooks = append([]func() error{h}, f.hooks...)
	f.mu.Unlock()
}

type env struct {
	cms   *fakeConfigMaps
	clock *clocktesting.FakeClock // the reporter's: entry times and its repeat and retry timers
}

func newEnv(t *testing.T, data map[string]string) *env {
	t.Helper()
	d := map[string]string{"other": otherVal}
	for k, v := range data {
		d[k] = v
	}
	return &env{cms: &fakeConfigMaps{data: d}, clock: clocktesting.NewFakeClock(t0)}
}

func (e *env) reporter(interval time.Duration) *Reporter {
	return &Reporter{
		ConfigMaps: e.cms,
		ConfigMap:  testCM,
		Pod:        testPod,
		Interval:   interval,
		Clock:      e.clock,
	}
}

// step moves the reporter's clock on by d (firing its timer when due) and returns the new time.
func (e *env) step(d time.Duration) time.Time {
	e.clock.Step(d)
	return e.clock.Now()
}

// armed waits until the reporter's timer is set (a repeat or a retry is waiting for the clock).
func (e *env) armed(t *testing.T) {
	t.Helper()
	eventually(t, "the reporter's timer to be set", e.clock.HasWaiters)
}

// data returns the ConfigMap's data and checks that "other" was not touched.
func (e *env) data(t *testing.T) map[string]string {
	t.Helper()
	e.cms.mu.Lock()
	defer e.cms.mu.Unlock()
	if got, ok := e.cms.data["other"]; !ok || got != otherVal {
		t.Fatalf("data[other] = %q (present %v), want %q", got, ok, otherVal)
	}
	return maps.Clone(e.cms.data)
}

// patches returns the merge patches sent so far.
func (e *env) patches(t *testing.T) [][]byte {
	t.Helper()
	e.cms.mu.Lock()
	defer e.cms.mu.Unlock()
	return slices.Clone(e.cms.patches)
}

// notifyPatches returns a channel that receives (without blocking the client) on every patch.
func (e *env) notifyPatches() <-chan struct{} {
	ch := make(chan struct{}, 1000)
	e.cms.hook(func() error {
		select {
		case ch <- struct{}{}:
		default:
		}
		return nil
	})
	return ch
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// quiet fails if a patch arrives on ch within d.
func quiet(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected patch: %s", what)
	case <-time.After(d):
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// start runs r until the returned stop is called (or the test ends); stop waits for Run to return.
func start(t *testing.T, r *Reporter) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitFor):
				t.Errorf("Run did not return after its context was cancelled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// entry decodes the pod's entry, or reports ok=false when there is none.
func entryOf(t *testing.T, data map[string]string) (Entry, bool) {
	t.Helper()
	v, ok := data[testPod]
	if !ok {
		return Entry{}, false
	}
	e, err := Decode(v)
	if err != nil {
		t.Fatalf("data[%s] = %q: %v", testPod, v, err)
	}
	return e, true
}

func checkEntry(t *testing.T, got Entry, state State, since, reportedAt time.Time) {
	t.Helper()
	if got.State != state || !got.Since.Equal(since) || !got.ReportedAt.Equal(reportedAt) {
		t.Fatalf("entry = %+v, want state %s since %v reportedAt %v", got, state, since, reportedAt)
	}
}

func TestReporterRemovesOwnStaleEntryAtStart(t *testing.T) {
	e := newEnv(t, map[string]string{testPod: enc(Open, t0.Add(-time.Hour), t0.Add(-time.Minute))})
	if _, ok := entryOf(t, e.data(t)); !ok {
		t.Fatal("seed entry missing")
	}
	notify := e.notifyPatches()
	r := e.reporter(50 * time.Millisecond)
	start(t, r)

	eventually(t, "the stale entry to be removed", func() bool {
		_, ok := entryOf(t, e.data(t))
		return !ok
	})
	ps := e.patches(t)
	if len(ps) != 1 {
		t.Fatalf("%d patches, want 1", len(ps))
	}
	var got map[string]any
	if err := json.Unmarshal(ps[0], &got); err != nil {
		t.Fatal(err)
	}
	if d, ok := got["data"].(map[string]any); !ok || len(got) != 1 || len(d) != 1 || d[testPod] != nil {
		t.Fatalf("patch %s, want {\"data\":{%q:null}}", ps[0], testPod)
	} else if _, ok := d[testPod]; !ok {
		t.Fatalf("patch %s does not name %s", ps[0], testPod)
	}

	// Closed: nothing more is written, however many intervals pass.
	drain(notify)
	e.step(5 * r.Interval)
	quiet(t, notify, 5*r.Interval, "written while Closed after the start removal")
	if n := len(e.patches(t)); n != 1 {
		t.Fatalf("%d patches, want 1", n)
	}
}

func TestReporterFollowsObserve(t *testing.T) {
	e := newEnv(t, nil)
	r := e.reporter(time.Hour) // no repeats during this test
	start(t, r)
	eventually(t, "the start removal", func() bool { return len(e.patches(t)) >= 1 })

	r.Observe(Open)
	eventually(t, "the Open entry", func() bool {
		_, ok := entryOf(t, e.data(t))
		return ok
	})
	got, _ := entryOf(t, e.data(t))
	checkEntry(t, got, Open, t0, t0)

	// Observing the same state again rewrites the entry but keeps since.
	t1 := e.step(5 * time.Second)
	r.Observe(Open)
	eventually(t, "the Open entry to be rewritten", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.ReportedAt.Equal(t1)
	})
	got, _ = entryOf(t, e.data(t))
	checkEntry(t, got, Open, t0, t1)

	t2 := e.step(10 * time.Second)
	r.Observe(HalfOpen)
	eventually(t, "the HalfOpen entry", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.State == HalfOpen
	})
	got, _ = entryOf(t, e.data(t))
	checkEntry(t, got, HalfOpen, t2, t2)

	e.step(time.Second)
	r.Observe(Closed)
	eventually(t, "the entry to be removed", func() bool {
		_, ok := entryOf(t, e.data(t))
		return !ok
	})
	if d := e.data(t); len(d) != 1 {
		t.Fatalf("data = %v, want only other", d)
	}
}

func TestReporterRepeatsWhileOpenOnly(t *testing.T) {
	e := newEnv(t, nil)
	notify := e.notifyPatches()
	r := e.reporter(50 * time.Millisecond)
	r.Observe(Open) // before Run: the first write sets the entry
	start(t, r)

	for i := range 3 {
		want := t0.Add(time.Duration(i) * time.Second)
		eventually(t, "reportedAt "+want.String(), func() bool {
			got, ok := entryOf(t, e.data(t))
			return ok && got.ReportedAt.Equal(want)
		})
		got, _ := entryOf(t, e.data(t))
		checkEntry(t, got, Open, t0, want) // since stays where the breaker opened
		e.armed(t)
		e.step(time.Second) // past the interval: the repeat is written at the new time
	}
	if n := len(e.patches(t)); n < 3 {
		t.Fatalf("%d patches while Open, want at least 3", n)
	}

	r.Observe(Closed)
	eventually(t, "the entry to be removed", func() bool {
		_, ok := entryOf(t, e.data(t))
		return !ok
	})
	n := len(e.patches(t))
	drain(notify)
	// The repeat timer armed by the last Open write (if it is still set) fires now and must not write.
	e.step(5 * r.Interval)
	quiet(t, notify, 5*r.Interval, "written while Closed")
	if m := len(e.patches(t)); m != n {
		t.Fatalf("%d patches after closing, want %d", m, n)
	}
	if d := e.data(t); len(d) != 1 {
		t.Fatalf("data = %v, want only other", d)
	}
}

func TestReporterRemovesEntryWhenStopped(t *testing.T) {
	for _, state := range []State{Open, HalfOpen} {
		t.Run(string(state), func(t *testing.T) {
			e := newEnv(t, nil)
			r := e.reporter(50 * time.Millisecond)
			stop := start(t, r)
			r.Observe(state)
			eventually(t, "the entry", func() bool {
				_, ok := entryOf(t, e.data(t))
				return ok
			})
			stop() // returns once Run has returned
			if _, ok := entryOf(t, e.data(t)); ok {
				t.Fatalf("entry still present after Run returned: %v", e.data(t))
			}
		})
	}
}

func TestReporterRetriesFailedWrites(t *testing.T) {
	e := newEnv(t, nil)
	const failures = 3
	var calls atomic.Int32
	e.cms.hook(func() error {
		if calls.Add(1) <= failures {
			return errors.New("injected failure")
		}
		return nil
	})
	logs := &syncbuf.Buffer{}
	r := e.reporter(time.Hour) // only retries, no repeats
	r.RetryInterval = 10 * time.Millisecond
	r.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.Observe(Open)
	stop := start(t, r)

	// Each failed write waits RetryInterval on the reporter's clock.
	eventually(t, "the entry after the failures", func() bool {
		if _, ok := entryOf(t, e.data(t)); ok {
			return true
		}
		if e.clock.HasWaiters() {
			e.step(r.RetryInterval)
		}
		return false
	})
	got, _ := entryOf(t, e.data(t))
	if now := e.clock.Now(); got.ReportedAt.Before(t0) || got.ReportedAt.After(now) {
		t.Fatalf("reportedAt %v, want a time of the retries, in [%v, %v]", got.ReportedAt, t0, now)
	}
	checkEntry(t, got, Open, t0, got.ReportedAt)
	if n := len(e.patches(t)); n != failures+1 {
		t.Fatalf("%d patches, want %d failures and 1 success", n, failures+1)
	}
	// A further successful write is no recovery: it logs nothing.
	t1 := e.step(time.Second)
	r.Observe(HalfOpen)
	eventually(t, "the HalfOpen entry", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.State == HalfOpen
	})
	got, _ = entryOf(t, e.data(t))
	checkEntry(t, got, HalfOpen, t1, t1)
	stop()
	if n := len(e.patches(t)); n != failures+3 {
		t.Fatalf("%d patches after stop, want %d", n, failures+3)
	}
	if _, ok := entryOf(t, e.data(t)); ok {
		t.Fatal("entry not removed at stop")
	}

	recs := logRecords(t, logs)
	if len(recs) != 2 {
		t.Fatalf("%d log records, want 2: %v", len(recs), recs)
	}
	warn, info := recs[0], recs[1]
	if warn["level"] != "WARN" || !strings.HasPrefix(warn["msg"].(string), "Could not report") ||
		warn["state"] != "Open" || warn["configMap"] != testCM || warn["error"] != "injected failure" {
		t.Errorf("first record %v, want a WARN Could not report ... with state Open, configMap c, the error", warn)
	}
	if info["level"] != "INFO" || info["msg"] != "Reported the circuit breaker state to the operator again" ||
		info["state"] != "Open" || info["configMap"] != testCM {
		t.Errorf("second record %v, want an INFO Reported ... again with state Open, configMap c", info)
	}
}

func TestObserveNeverBlocks(t *testing.T) {
	clock := clocktesting.NewFakeClock(t0)
	r := &Reporter{ConfigMap: testCM, Pod: testPod, Interval: time.Second, Clock: clock}
	states := []State{Open, HalfOpen, Closed}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			clock.Step(time.Second)
			r.Observe(states[i%len(states)])
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Observe blocked without Run")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != Open || !r.since.Equal(t0.Add(1000*time.Second)) {
		t.Fatalf("state %s since %v, want Open since %v", r.state, r.since, t0.Add(1000*time.Second))
	}
}
