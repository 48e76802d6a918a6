package devenv_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

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
