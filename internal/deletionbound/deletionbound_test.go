package deletionbound

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestAttempt(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	const refused = "deleting topic: refused"
	ctx := context.Background()
	g := NewWithT(t)

	// Before the deadline: an attempt bounded by it.
	c, cancel := Attempt(ctx, clk, now.Add(3*time.Second), true)
	d, ok := c.Deadline()
	g.Expect(ok).To(BeTrue())
	g.Expect(d).To(Equal(now.Add(3 * time.Second)))
	cancel()

	// Past it, after a failed attempt: no new attempt, the last error goes into the event.
	c, cancel = Attempt(ctx, clk, now.Add(-time.Second), true)
	g.Expect(c).To(BeNil())
	cancel()
	g.Expect(LastError(refused, true)).To(Equal(refused))

	// Past it without any attempt (the operator was down): one attempt.
	c, cancel = Attempt(ctx, clk, now.Add(-time.Second), false)
	g.Expect(c).NotTo(BeNil())
	_, ok = c.Deadline()
	g.Expect(ok).To(BeFalse(), "bounded by the Kafka request timeout only")
	cancel()
	g.Expect(LastError("", false)).To(Equal("the deletion bound passed"))
}

func TestDeadline(t *testing.T) {
	g := NewWithT(t)
	o := &metav1.ObjectMeta{}
	g.Expect(Deadline(o, time.Minute)).To(BeZero())
	ts := metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	o.DeletionTimestamp = &ts
	g.Expect(Deadline(o, time.Minute)).To(Equal(ts.Add(time.Minute)))
}
