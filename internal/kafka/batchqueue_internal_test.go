package kafka

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestAPanickingSendFailsItsCallersAndTheQueueGoesOn(t *testing.T) {
	g := NewWithT(t)
	calls := 0
	q := &queue[string]{window: time.Millisecond, max: 2, clock: clocktesting.NewFakeClock(time.Now()), send: func(batch []*pending[string]) {
		calls++
		if calls == 1 {
			panic("a broker's answer the code did not expect")
		}
	}}
	errs := make(chan error, 2)
	for _, r := range []string{"a", "b"} {
		go func() { errs <- q.do(context.Background(), "describe", r) }()
	}
	for range 2 {
		var err error
		g.Eventually(errs).Should(Receive(&err))
		g.Expect(err).To(MatchError(ContainSubstring("panic: a broker's answer the code did not expect")))
	}
	// The next full batch is sent and answered.
	for _, r := range []string{"c", "d"} {
		go func() { errs <- q.do(context.Background(), "describe", r) }()
	}
	for range 2 {
		var err error
		g.Eventually(errs).Should(Receive(&err))
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(calls).To(Equal(2))
}
