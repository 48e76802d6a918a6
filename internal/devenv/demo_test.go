package devenv_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/devenv"
)

func TestDemoSinkFailsOnCommand(t *testing.T) {
	s := devenv.DefaultDemoSink()
	deliver := func(n int) int {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Kafka-Key", devenv.DemoKey(n))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	cases := []struct {
		name string
		n    int
		want []int
	}{
		{"a healthy record succeeds at once", 1, []int{200, 200}},
		{"a transient record fails twice, then succeeds", 3, []int{503, 503, 200}},
		{"a permanent record always fails", 20, []int{422, 422, 422}},
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := deliver(c.n); got != want {
				t.Errorf("%s: delivery %d answered %d, want %d", c.name, i+1, got, want)
			}
		}
	}
	if got := len(s.Attempts(devenv.DemoKey(3))); got != 3 {
		t.Errorf("record 3 was delivered %d times, want 3", got)
	}
	if s.Succeeded() != 2 || s.Requests() != 8 {
		t.Errorf("succeeded %d of %d requests, want 2 of 8", s.Succeeded(), s.Requests())
	}
}

// TestFirstRetryDelays: the live view's figures are the gaps between each record's first and
// second delivery, sorted, and their deciles.
func TestFirstRetryDelays(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	s := devenv.DefaultDemoSink()
	s.Clock = clk
	for _, n := range []int{7, 3, 1} { // 3 and 7 fail twice; 1 succeeds at once
		for range 2 {
			req := httptest.NewRequest(http.MethodPost, "/", nil)
			req.Header.Set("Kafka-Key", devenv.DemoKey(n))
			s.ServeHTTP(httptest.NewRecorder(), req)
			clk.SetTime(clk.Now().Add(time.Duration(n) * time.Millisecond))
		}
	}
	want := []time.Duration{time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond}
	if d := s.FirstRetryDelays(); !slices.Equal(d, want) {
		t.Fatalf("delays %v, want %v (each record's gap, sorted)", d, want)
	}
	if at := s.Attempts(devenv.DemoKey(3)); len(at) != 2 || !at[0].Equal(time.Date(2026, 11, 26, 12, 0, 0, 14e6, time.UTC)) {
		t.Errorf("record 3's attempts at %v, want two, the first 14ms after the start (after record 7's two)", at)
	}
	if got := devenv.Deciles(nil); got != "-" {
		t.Errorf("Deciles(nil) = %q, want -", got)
	}
	if got := devenv.Deciles([]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}); got != "p10 1s, p50 2s, p90 3s" {
		t.Errorf("Deciles = %q", got)
	}
}

// TestDemoSinkCost: with a cost, a delivery is answered (and stamped) only once the cost has
// passed on the sink's clock.
func TestDemoSinkCost(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	s := &devenv.DemoSink{Clock: clk, Cost: 20 * time.Millisecond}
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Kafka-Key", devenv.DemoKey(1))
		s.ServeHTTP(w, req)
	}()
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	g.Consistently(done, 50*time.Millisecond).ShouldNot(BeClosed(), "answered before its cost passed")
	g.Expect(s.Requests()).To(BeZero())
	clk.Step(20 * time.Millisecond)
	g.Eventually(done).Should(BeClosed())
	g.Expect(w.Code).To(Equal(http.StatusOK))
	g.Expect(s.Attempts(devenv.DemoKey(1))).To(Equal([]time.Time{start.Add(20 * time.Millisecond)}))
}
