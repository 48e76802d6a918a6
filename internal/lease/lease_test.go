package lease

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestAKeyNotRenewedExpiresAndOneRenewedStays(t *testing.T) {
	var tb Table[string]
	tb.Renew("gone", t0, time.Minute) // shorter than Min: Min
	tb.Renew("kept", t0, time.Minute)
	if got := tb.Expired(t0.Add(Min - time.Second)); got != nil {
		t.Fatalf("expired before Min: %v", got)
	}
	if !tb.Holds("gone", t0.Add(Min)) || tb.Holds("gone", t0.Add(Min+time.Second)) {
		t.Fatal("a key is held exactly Min")
	}
	tb.Renew("kept", t0.Add(Min), time.Minute)
	got := tb.Expired(t0.Add(Min + time.Second))
	if !slices.Equal(got, []string{"gone"}) {
		t.Fatalf("expired %v, want [gone]", got)
	}
	if tb.Len() != 1 || !tb.Holds("kept", t0.Add(Min+time.Second)) {
		t.Fatalf("kept %d keys", tb.Len())
	}
}

func TestASweepLooksAtMostOncePerMin(t *testing.T) {
	var tb Table[int]
	tb.Renew(1, t0, 0)
	if got := tb.Expired(t0.Add(2 * Min)); len(got) != 1 {
		t.Fatalf("first sweep: %v", got)
	}
	tb.Renew(2, t0, 0) // already past its lease
	if got := tb.Expired(t0.Add(2*Min + time.Second)); got != nil {
		t.Fatalf("a sweep within Min of the last: %v", got)
	}
	if got := tb.Expired(t0.Add(3*Min + time.Second)); len(got) != 1 {
		t.Fatalf("the sweep a Min later: %v", got)
	}
}

func TestARenewalNeverShortensALease(t *testing.T) {
	var tb Table[string]
	tb.Renew("k", t0, time.Hour)
	tb.Renew("k", t0.Add(time.Minute), 0)
	if !tb.Holds("k", t0.Add(59*time.Minute)) {
		t.Fatal("a later, shorter renewal cut the lease")
	}
}

func TestForIsThreeIntervalsAndAtLeastMin(t *testing.T) {
	if For(time.Second) != Min || For(time.Hour) != 3*time.Hour {
		t.Fatalf("For(1s) = %v, For(1h) = %v", For(time.Second), For(time.Hour))
	}
}

func TestAMapEntryUsedStaysAndOneUnusedGoes(t *testing.T) {
	var m Map[string, int]
	m.Put("read", 1, t0, 0)
	m.Put("left", 2, t0, 0)
	for at := t0; at.Before(t0.Add(3 * Min)); at = at.Add(Min / 2) {
		if v, ok := m.Get("read", at, 0); !ok || v != 1 {
			t.Fatalf("at %v: read = %d, %v", at.Sub(t0), v, ok)
		}
	}
	if _, ok := m.Get("left", t0.Add(3*Min), 0); ok {
		t.Fatal("an entry unused past its lease is still there")
	}
	if m.Len() != 1 {
		t.Fatalf("%d entries, want 1", m.Len())
	}
	m.Update("read", t0.Add(3*Min), 0, func(v int, ok bool) int { return v + 10 })
	if v, _ := m.Get("read", t0.Add(3*Min), 0); v != 11 {
		t.Fatalf("updated to %d", v)
	}
}

// TestALeaseIsAtMostMaxWhateverTheInterval: an author's interval of 900000h (three times it
// overflows a Duration) or 100000h still gives a lease of Max, so what a deleted resource left
// goes within a day.
func TestALeaseIsAtMostMaxWhateverTheInterval(t *testing.T) {
	for _, d := range []time.Duration{100000 * time.Hour, 900000 * time.Hour, 1<<63 - 1} {
		if got := For(d); got != Max {
			t.Errorf("For(%v) = %v, want %v", d, got, Max)
		}
	}
	var tb Table[string]
	tb.Renew("k", t0, 1<<63-1)
	if tb.Holds("k", t0.Add(Max+time.Second)) {
		t.Fatal("a renewal held a key past Max")
	}
}
