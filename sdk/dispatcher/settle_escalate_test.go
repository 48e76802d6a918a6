package dispatcher

import (
	"testing"
	"time"
)

// oldDLQ is the state deadLettered kept before the refactor (6a8a9f9: dlqTries, dlqLevel 0..2,
// dlqStuck) and oldDeadLettered its decision after a failed write, transcribed from that commit:
// what is written next ("novalue", "stripped", or "" for the same record after wait) and whether
// the dead letter is counted stuck now.
type oldDLQ struct {
	tries int
	level int
	stuck bool
}

func oldDeadLettered(s oldDLQ, big, hasValue bool) (next oldDLQ, write string, wait time.Duration, stick bool) {
	s.tries++
	switch {
	case big && s.level == 0 && hasValue:
		s.level = 1
		return s, "novalue", 0, false
	case s.level < 2 && (big || s.tries >= deadLetterTries):
		s.level = 2
		return s, "stripped", 0, false
	}
	wait = deadLetterRetryWait << min(s.tries-1, 5)
	if s.level == 2 {
		wait = stuckRetryWait
		if !s.stuck {
			s.stuck, stick = true, true
		}
	}
	return s, "", wait, stick
}

// TestEscalateAgreesWithTheOldCode: for every state a dead letter can be in (up to 12 failed
// tries, each level, stuck or not) and every failure (too large or not, with a value or not),
// escalate and deadLetterFailed's reading of it (which record next, whether to stick) decide what
// the code before the refactor decided: no level skipped or added, the same waits, stuck counted
// once.
func TestEscalateAgreesWithTheOldCode(t *testing.T) {
	levels := []struct {
		old oldDLQ
		new dlqLevel
	}{
		{oldDLQ{level: 0}, dlqWhole},
		{oldDLQ{level: 1}, dlqNoValue},
		{oldDLQ{level: 2}, dlqStripped},
		{oldDLQ{level: 2, stuck: true}, dlqStuck},
	}
	toNew := func(o oldDLQ) dlqState {
		l := dlqLevel(o.level)
		if o.stuck {
			l = dlqStuck
		}
		return dlqState{tries: o.tries, level: l}
	}
	checked := 0
	for tries := range 13 {
		for _, lv := range levels {
			for _, big := range []bool{false, true} {
				for _, hasValue := range []bool{false, true} {
					o := lv.old
					o.tries = tries
					in := dlqState{tries: tries, level: lv.new}
					wantState, wantWrite, wantWait, wantStick := oldDeadLettered(o, big, hasValue)

					got, wait := escalate(in, big, hasValue)
					// deadLetterFailed's switch on prev and next.
					write, stick := "", false
					switch {
					case got.level == dlqNoValue && in.level == dlqWhole:
						write = "novalue"
					case got.level == dlqStripped && in.level < dlqStripped:
						write = "stripped"
					case got.level == dlqStuck && in.level != dlqStuck:
						stick = true
					}
					if got != toNew(wantState) || write != wantWrite || wait != wantWait || stick != wantStick {
						t.Errorf("from %+v (old %+v), big %v, value %v: new %+v write %q wait %v stick %v; old %+v write %q wait %v stick %v",
							in, o, big, hasValue, got, write, wait, stick, toNew(wantState), wantWrite, wantWait, wantStick)
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d states and failures agree with the code before the refactor", checked)
}

// TestEscalateNeverSkipsAndEnds: walking the escalation from a fresh dead letter, failure
// after failure, with every pattern of "too large" answers, the record written goes whole, then
// (only if it was too large with a value) without its value, then stripped, then stuck, in that
// order, and is stuck after at most deadLetterTries*2 failures: nothing retries fast for ever.
func TestEscalateNeverSkipsAndEnds(t *testing.T) {
	const steps = 8
	for pattern := range 1 << steps {
		for _, hasValue := range []bool{false, true} {
			s := dlqState{}
			value := hasValue
			var path []dlqLevel
			for i := range steps {
				big := pattern&(1<<i) != 0
				prev := s.level
				s, _ = escalate(s, big, value)
				if s.level < prev {
					t.Fatalf("pattern %08b value %v: level went back from %d to %d", pattern, hasValue, prev, s.level)
				}
				if s.level == dlqNoValue && prev != dlqNoValue && (prev != dlqWhole || !big || !value) {
					t.Fatalf("pattern %08b value %v: without value from level %d (big %v, value %v)", pattern, hasValue, prev, big, value)
				}
				if s.level == dlqStuck && prev < dlqStripped {
					t.Fatalf("pattern %08b value %v: stuck from level %d without the stripped write", pattern, hasValue, prev)
				}
				if s.level != dlqWhole {
					value = false // the no-value and stripped records carry no value
				}
				path = append(path, s.level)
			}
			if s.tries != steps {
				t.Fatalf("pattern %08b: %d tries counted for %d failures", pattern, s.tries, steps)
			}
			for i, l := range path {
				if i+1 >= 2*deadLetterTries && l != dlqStuck {
					t.Fatalf("pattern %08b value %v: after %d failures still at level %d (%v)", pattern, hasValue, i+1, l, path)
				}
			}
		}
	}
}
