package deadletters

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Matcher is a compiled selector: all the criteria given must hold; within a list, any item.
type Matcher struct {
	reasons, errorTypes, pipelines map[string]bool
	states                         map[retryv1alpha1.DeadLetterState]bool
	after, before                  time.Time
	keys                           map[string]bool
	headers                        []retryv1alpha1.HeaderMatch
	records                        map[ID]bool
}

// DefaultStates are the states an action selects when its selector names none: Pending for Replay,
// Resolve and Ignore; Resolved, Ignored and Replayed for Purge.
func DefaultStates(action retryv1alpha1.DeadLetterActionType) []retryv1alpha1.DeadLetterState {
	if action == retryv1alpha1.DeadLetterPurge {
		return []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored, retryv1alpha1.DeadLetterReplayed}
	}
	return []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending}
}

// Compile compiles the selector of an action (nil selects every dead letter in the default states).
// It checks what the CRD's validation checks, for a caller that did not go through the API server:
// the bounds of every list, the record references, and that Purge never selects Pending.
func Compile(action retryv1alpha1.DeadLetterActionType, sel *retryv1alpha1.DeadLetterSelector) (*Matcher, error) {
	if sel == nil {
		sel = &retryv1alpha1.DeadLetterSelector{}
	}
	m := &Matcher{states: map[retryv1alpha1.DeadLetterState]bool{}}
	for _, c := range []struct {
		name  string
		items []retryv1alpha1.DeadLetterName
		max   int
		into  *map[string]bool
	}{
		{"reasons", sel.Reasons, 8, &m.reasons},
		{"errorTypes", sel.ErrorTypes, 32, &m.errorTypes},
		{"pipelines", sel.Pipelines, 32, &m.pipelines},
	} {
		if len(c.items) > c.max {
			return nil, fmt.Errorf("selector.%s: %d items, at most %d", c.name, len(c.items), c.max)
		}
		if len(c.items) > 0 {
			*c.into = map[string]bool{}
			for _, it := range c.items {
				if len(it) > MaxNameBytes {
					return nil, fmt.Errorf("selector.%s: an item longer than %d bytes", c.name, MaxNameBytes)
				}
				(*c.into)[string(it)] = true
			}
		}
	}
	states := sel.States
	if len(states) == 0 {
		states = DefaultStates(action)
	}
	if len(states) > 4 {
		return nil, fmt.Errorf("selector.states: %d items, at most 4", len(states))
	}
	for _, s := range states {
		switch s {
		case retryv1alpha1.DeadLetterPending, retryv1alpha1.DeadLetterReplayed, retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored:
		default:
			return nil, fmt.Errorf("selector.states: unknown state %q", cutString(string(s), 32))
		}
		if action == retryv1alpha1.DeadLetterPurge && s == retryv1alpha1.DeadLetterPending {
			return nil, fmt.Errorf("selector.states: Purge never deletes Pending dead letters")
		}
		m.states[s] = true
	}
	if sel.After != nil {
		m.after = sel.After.Time
	}
	if sel.Before != nil {
		m.before = sel.Before.Time
	}
	if action == retryv1alpha1.DeadLetterPurge && m.before.IsZero() {
		return nil, fmt.Errorf("selector.before: Purge needs it")
	}
	if len(sel.Keys) > retryv1alpha1.MaxSelectorKeys {
		return nil, fmt.Errorf("selector.keys: %d items, at most %d", len(sel.Keys), retryv1alpha1.MaxSelectorKeys)
	}
	if len(sel.Keys) > 0 {
		m.keys = map[string]bool{}
		for _, k := range sel.Keys {
			m.keys[string(k)] = true
		}
	}
	if len(sel.Headers) > 16 {
		return nil, fmt.Errorf("selector.headers: %d items, at most 16", len(sel.Headers))
	}
	m.headers = slices.Clone(sel.Headers)
	if len(sel.Records) > retryv1alpha1.MaxSelectorRecords {
		return nil, fmt.Errorf("selector.records: %d items, at most %d", len(sel.Records), retryv1alpha1.MaxSelectorRecords)
	}
	if len(sel.Records) > 0 {
		m.records = map[ID]bool{}
		for _, r := range sel.Records {
			id, ok := ParseID(string(r))
			if !ok {
				return nil, fmt.Errorf("selector.records: %q is not <partition>/<offset>", cutString(string(r), 32))
			}
			m.records[id] = true
		}
	}
	return m, nil
}

// MatchEntry reports whether e meets every criterion but the state.
func (m *Matcher) MatchEntry(e *Entry) bool {
	if m.records != nil && !m.records[e.ID] {
		return false
	}
	if m.reasons != nil && !m.reasons[e.Reason] {
		return false
	}
	if m.errorTypes != nil && !m.errorTypes[e.ErrorType] {
		return false
	}
	if m.pipelines != nil && !m.pipelines[e.Pipeline] {
		return false
	}
	if !m.after.IsZero() && e.Time.Before(m.after) {
		return false
	}
	if !m.before.IsZero() && !e.Time.Before(m.before) {
		return false
	}
	if m.keys != nil && (e.Key == nil || !m.keys[string(e.Key)]) {
		return false
	}
	for _, h := range m.headers {
		v, ok := e.Header(h.Name)
		if !ok || !bytes.Equal(v, []byte(h.Value)) {
			return false
		}
	}
	return true
}

// MatchState reports whether s is one of the selected states.
func (m *Matcher) MatchState(s State) bool { return m.states[s.Name()] }

// Match reports whether e, in state s, meets every criterion.
func (m *Matcher) Match(e *Entry, s State) bool { return m.MatchEntry(e) && m.MatchState(s) }

// Records returns the explicit records selected, per partition (nil when the selector names none):
// a scan needs to read only from the lowest to the highest of each partition.
func (m *Matcher) Records() map[int32][]int64 {
	if m.records == nil {
		return nil
	}
	out := map[int32][]int64{}
	for id := range m.records {
		out[id.Partition] = append(out[id.Partition], id.Offset)
	}
	for _, offs := range out {
		slices.Sort(offs)
	}
	return out
}
