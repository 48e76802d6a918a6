package dispatcher

import (
	"testing"
	"time"
)

// TestEscalate: a failed dead-letter write leads, in order, to the whole record again after a
// growing wait, the record without its value (at once, only when too large and it had one), the
// record stripped (at once, when too large or after deadLetterTries), then stuck (every
// stuckRetryWait).
func TestEscalate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        dlqState
		big, val  bool
		want      dlqState
		wantAfter time.Duration
	}{
		{"a first failure retries the whole record after a second", dlqState{}, false, true, dlqState{1, dlqWhole}, time.Second},
		{"a second failure waits twice as long", dlqState{1, dlqWhole}, false, true, dlqState{2, dlqWhole}, 2 * time.Second},
		{"the last try writes it stripped at once", dlqState{2, dlqWhole}, false, true, dlqState{3, dlqStripped}, 0},
		{"too large with a value: written without it at once", dlqState{}, true, true, dlqState{1, dlqNoValue}, 0},
		{"too large without a value: stripped at once", dlqState{}, true, false, dlqState{1, dlqStripped}, 0},
		{"too large without its value: stripped at once", dlqState{1, dlqNoValue}, true, false, dlqState{2, dlqStripped}, 0},
		{"the no-value record failing otherwise is retried", dlqState{1, dlqNoValue}, false, false, dlqState{2, dlqNoValue}, 2 * time.Second},
		{"the no-value record failing its last try is stripped", dlqState{2, dlqNoValue}, false, false, dlqState{3, dlqStripped}, 0},
		{"the stripped record failing is stuck", dlqState{3, dlqStripped}, false, false, dlqState{4, dlqStuck}, stuckRetryWait},
		{"the stripped record too large is stuck", dlqState{1, dlqStripped}, true, false, dlqState{2, dlqStuck}, stuckRetryWait},
		{"a stuck record stays stuck", dlqState{4, dlqStuck}, false, false, dlqState{5, dlqStuck}, stuckRetryWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, after := escalate(tc.in, tc.big, tc.val)
			if got != tc.want || after != tc.wantAfter {
				t.Errorf("escalate(%+v, big %v, value %v) = %+v, %v; want %+v, %v", tc.in, tc.big, tc.val, got, after, tc.want, tc.wantAfter)
			}
		})
	}
}
