package kafkastats

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/lease"
)

func TestCountsKeepWhatEachMemberPublished(t *testing.T) {
	g := NewWithT(t)
	var c Counts
	_, known := c.Get("q", "ns/a")
	g.Expect(known).To(BeFalse(), "nothing published yet")
	c.Set("q", []Count{{Name: "ns/a", Count: 3}, {Name: "ns/b", Count: 1}}, liveNow, time.Minute)
	n, known := c.Get("q", "ns/a")
	g.Expect(known).To(BeTrue())
	g.Expect(n).To(Equal(int64(3)))
	n, known = c.Get("q", "ns/absent")
	g.Expect(known).To(BeTrue(), "the counts are complete: a name not in them has none")
	g.Expect(n).To(BeZero())
	c.Set("q", []Count{{Name: "ns/b", Count: 2}}, liveNow, time.Minute)
	n, _ = c.Get("q", "ns/a")
	g.Expect(n).To(BeZero(), "a new publication replaces the old")
}

// TestCountsOfAMemberThatStopsPublishingGo: a queue deleted publishes no more; once its lease (three
// of its intervals, at least lease.Min) is over, the next publication of another drops its counts.
func TestCountsOfAMemberThatStopsPublishingGo(t *testing.T) {
	g := NewWithT(t)
	var c Counts
	c.Set("gone", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Minute)
	c.Set("slow", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Hour)
	for at := liveNow; !at.After(liveNow.Add(2 * lease.Min)); at = at.Add(time.Minute) {
		c.Set("kept", nil, at, time.Minute)
	}
	_, known := c.Get("gone", "ns/a")
	g.Expect(known).To(BeFalse(), "its lease ended")
	_, known = c.Get("slow", "ns/a")
	g.Expect(known).To(BeTrue(), "an hourly publisher is held three hours")
	g.Expect(c.Len()).To(Equal(2))
}
