package kafkastats

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestCountsKeepWhatEachMemberPublished(t *testing.T) {
	g := NewWithT(t)
	var c Counts
	_, known := c.Get("q", "ns/a")
	g.Expect(known).To(BeFalse(), "nothing published yet")
	c.Set("q", []Count{{Name: "ns/a", Count: 3}, {Name: "ns/b", Count: 1}})
	n, known := c.Get("q", "ns/a")
	g.Expect(known).To(BeTrue())
	g.Expect(n).To(Equal(int64(3)))
	n, known = c.Get("q", "ns/absent")
	g.Expect(known).To(BeTrue(), "the counts are complete: a name not in them has none")
	g.Expect(n).To(BeZero())
	c.Set("q", []Count{{Name: "ns/b", Count: 2}})
	n, _ = c.Get("q", "ns/a")
	g.Expect(n).To(BeZero(), "a new publication replaces the old")
	c.Forget("q")
	_, known = c.Get("q", "ns/b")
	g.Expect(known).To(BeFalse())
}
