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
	_, known := c.Get("q", "ns/a", liveNow)
	g.Expect(known).To(BeFalse(), "nothing published yet")
	c.Set("q", []Count{{Name: "ns/a", Count: 3}, {Name: "ns/b", Count: 1}}, liveNow, time.Minute)
	n, known := c.Get("q", "ns/a", liveNow)
	g.Expect(known).To(BeTrue())
	g.Expect(n).To(Equal(int64(3)))
	n, known = c.Get("q", "ns/absent", liveNow)
	g.Expect(known).To(BeTrue(), "the counts are complete: a name not in them has none")
	g.Expect(n).To(BeZero())
	c.Set("q", []Count{{Name: "ns/b", Count: 2}}, liveNow, time.Minute)
	n, _ = c.Get("q", "ns/a", liveNow)
	g.Expect(n).To(BeZero(), "a new publication replaces the old")
}

// TestCountsOfAMemberThatStopsPublishingGo: a queue deleted publishes no more; once its lease (three
// of its intervals, at least lease.Min) is over, the next publication of another drops its counts.
func TestCountsOfAMemberThatStopsPublishingGo(t *testing.T) {
	g := NewWithT(t)
	var c Counts
	c.Set("gone", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Minute)
	c.Set("slow", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Hour)
	c.Set("outage", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Minute)
	at := liveNow
	for ; !at.After(liveNow.Add(2 * lease.Min)); at = at.Add(time.Minute) {
		c.Set("kept", nil, at, time.Minute)
		c.Renew("outage", at, time.Minute) // reconciled, Kafka unreachable: nothing published
	}
	_, known := c.Get("gone", "ns/a", at)
	g.Expect(known).To(BeFalse(), "its lease ended")
	_, known = c.Get("slow", "ns/a", at)
	g.Expect(known).To(BeTrue(), "an hourly publisher is held three hours")
	n, known := c.Get("outage", "ns/a", at)
	g.Expect(known).To(BeTrue(), "renewed through the outage")
	g.Expect(n).To(Equal(int64(1)))
	g.Expect(c.Len()).To(Equal(3))

	// An expired entry not swept yet (nobody published since) is not served.
	var d Counts
	d.Set("q", []Count{{Name: "ns/a", Count: 1}}, liveNow, time.Minute)
	_, known = d.Get("q", "ns/a", liveNow.Add(lease.Min+time.Second))
	g.Expect(known).To(BeFalse())
	d.Renew("q", liveNow.Add(lease.Min+time.Second), time.Minute)
	_, known = d.Get("q", "ns/a", liveNow.Add(lease.Min+2*time.Second))
	g.Expect(known).To(BeFalse(), "a renewal does not bring expired counts back")
}
