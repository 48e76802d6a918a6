package controllers

import (
	"testing"
	"time"
)

// The requeues a reconcile's phases ask for merge into the soonest: zero asks for none, and none
// asking is no requeue.
func TestSoonestMergesTheRequeuesThePhasesAskFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after []time.Duration
		want  time.Duration
	}{
		{"none asked", nil, 0},
		{"all zero", []time.Duration{0, 0}, 0},
		{"one asks", []time.Duration{0, 30 * time.Second, 0}, 30 * time.Second},
		{"the soonest wins", []time.Duration{time.Minute, 5 * time.Second, 30 * time.Second}, 5 * time.Second},
		{"order does not matter", []time.Duration{5 * time.Second, time.Minute}, 5 * time.Second},
		{"negative asks for none", []time.Duration{-time.Second, time.Minute}, time.Minute},
	} {
		if got := soonest(tc.after...); got != tc.want {
			t.Errorf("%s: soonest(%v) = %v, want %v", tc.name, tc.after, got, tc.want)
		}
	}
}
