package kafkaspec

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
)

func TestClaimWinner(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	c := func(ns, name, uid string, created time.Time) Claimant {
		return Claimant{Kind: "DeadLetterQueue", Namespace: ns, Name: name, UID: types.UID(uid), Created: created}
	}
	for name, tc := range map[string]struct {
		claimants []Claimant
		want      string
	}{
		"the only claimant wins":                        {[]Claimant{c("a", "q", "1", t0)}, "a/q"},
		"the oldest wins":                               {[]Claimant{c("a", "new", "1", t0.Add(time.Second)), c("b", "old", "2", t0)}, "b/old"},
		"same second: namespace, then name, decide":     {[]Claimant{c("b", "a", "1", t0), c("a", "z", "2", t0), c("a", "y", "3", t0)}, "a/y"},
		"same second, same name elsewhere: UID decides": {[]Claimant{c("a", "q", "2", t0), c("a", "q", "1", t0)}, "a/q#1"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			w, ok := Winner(tc.claimants)
			g.Expect(ok).To(BeTrue())
			got := w.Namespace + "/" + w.Name
			if tc.want == "a/q#1" {
				got += "#" + string(w.UID)
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
	_, ok := Winner(nil)
	NewWithT(t).Expect(ok).To(BeFalse())
}

func TestSameServersIgnoresOrderCaseAndRepeats(t *testing.T) {
	g := NewWithT(t)
	g.Expect(SameServers([]string{"B:9092", " a:9092"}, []string{"a:9092", "b:9092", "a:9092"})).To(BeTrue())
	g.Expect(SameServers([]string{"127.0.0.1:9092"}, []string{"localhost:9092"})).To(BeFalse(), "told apart by the cluster ID only")
}
