// Package circuitstate is how a pipeline's consumers tell the operator the state of their circuit
// breakers.
//
// The route: the operator makes, for every ConsumerPipeline, a ConfigMap "<pipeline>-dispatcher-circuit"
// and a ServiceAccount, Role and RoleBinding that let the pipeline's pods get and patch that one
// ConfigMap and nothing else (the Role names it in resourceNames). A pod whose breaker is not Closed
// keeps an entry under its own name in the ConfigMap's data, repeated every report interval; when
// its breaker closes, and when it stops, it removes the entry. Every pod writes only its own key
// with a JSON merge patch, so replicas never overwrite each other and need no read-modify-write.
// The operator watches the ConfigMap (it owns it), folds the fresh entries into status.circuit
// (Open when any pod is open, else HalfOpen when any is half-open, else Closed) and deletes the
// entries a vanished pod left, which stop being repeated and go stale after TTL.
//
// The same entry carries a pod's Kafka connection problem (kafka.go: authentication, TLS or
// authorization refused by the brokers), written while it persists even with the breaker Closed,
// so that the pipeline's DeploymentReady condition says why its consumers are not ready.
//
// Why not the pipeline's status, or scraping the pods' metrics: a status subresource can be
// granted per object but not per field, so consumers able to patch it could rewrite everything the
// operator reports, and replicas would overwrite each other's state; scraping needs the operator
// to reach every pod over the network (network policies, service meshes, local processes in
// `make dev`). Entries are written only while a breaker is not Closed or Kafka refuses the pod, so
// a healthy fleet writes nothing.
package circuitstate

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// State is a circuit breaker state, as the API spells it (v1alpha1.CircuitState).
type State string

// The states.
const (
	Closed   State = "Closed"
	HalfOpen State = "HalfOpen"
	Open     State = "Open"
)

// rank orders the states for the fold: the worst wins.
func (s State) rank() int {
	switch s {
	case Open:
		return 2
	case HalfOpen:
		return 1
	}
	return 0
}

// Entry is one pod's report, the JSON value under the pod's name in the ConfigMap's data.
type Entry struct {
	// State is the pod's breaker state: Open or HalfOpen, or Closed when the entry only reports a
	// Kafka problem (a Closed breaker alone has no entry).
	State State `json:"state"`
	// Since is when the breaker entered State.
	Since time.Time `json:"since"`
	// Kafka is the pod's Kafka connection problem, absent while it has none.
	Kafka *KafkaProblem `json:"kafka,omitempty"`
	// ReportedAt is when the pod last wrote the entry.
	ReportedAt time.Time `json:"reportedAt"`
}

// Encode returns the entry as the ConfigMap value.
func (e Entry) Encode() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// maxEntryBytes bounds a value Decode parses: an entry is a few hundred bytes, and a pod's
// ServiceAccount could write anything into its key.
const maxEntryBytes = 4 << 10

// Decode parses a ConfigMap value. A Kafka problem's message is bounded again (the writer is a pod,
// not the operator).
func Decode(v string) (Entry, error) {
	if len(v) > maxEntryBytes {
		return Entry{}, fmt.Errorf("entry of %d bytes exceeds %d", len(v), maxEntryBytes)
	}
	var e Entry
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return Entry{}, err
	}
	if e.Kafka != nil {
		if err := e.Kafka.check(); err != nil {
			return Entry{}, err
		}
		// A problem cannot start after it was reported (a forged or skewed since).
		if e.Kafka.Since.IsZero() || e.Kafka.Since.After(e.ReportedAt) {
			e.Kafka.Since = e.ReportedAt
		}
	}
	if e.State != Open && e.State != HalfOpen && (e.Kafka == nil || e.State != Closed) {
		return Entry{}, fmt.Errorf("state %q is not Open or HalfOpen, nor Closed with a Kafka problem", e.State)
	}
	if e.ReportedAt.IsZero() {
		return Entry{}, fmt.Errorf("reportedAt is missing")
	}
	return e, nil
}

// MergePatch is the JSON merge patch that sets (entry non-nil) or removes (nil) pod's entry.
func MergePatch(pod string, entry *Entry) []byte {
	var v any
	if entry != nil {
		v = entry.Encode()
	}
	b, _ := json.Marshal(map[string]any{"data": map[string]any{pod: v}})
	return b
}

// Summary is the fold of a ConfigMap's entries.
type Summary struct {
	// State is the worst fresh state: Closed when no fresh entry remains.
	State State
	// Pods are the pods reporting State (none for Closed), sorted.
	Pods []string
	// Since is the earliest Since among Pods.
	Since time.Time
	// Expires is when the first fresh entry goes stale unless repeated; zero when none is fresh.
	Expires time.Time
	// Stale are the keys to delete: entries older than the TTL and values that do not parse.
	Stale []string
	// Kafka folds the fresh Kafka problems; nil when no fresh entry reports one.
	Kafka *KafkaSummary
}

// Fold folds a ConfigMap's data: entries reported within ttl of now count, the others are listed
// as stale.
func Fold(data map[string]string, now time.Time, ttl time.Duration) Summary {
	s := Summary{State: Closed}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, pod := range keys {
		e, err := Decode(data[pod])
		expires := e.ReportedAt.Add(ttl)
		// An entry reported more than ttl ahead of now (forged, or a clock far ahead) would stay
		// fresh long after its pod stopped repeating it.
		if err != nil || !now.Before(expires) || e.ReportedAt.After(now.Add(ttl)) {
			s.Stale = append(s.Stale, pod)
			continue
		}
		if s.Expires.IsZero() || expires.Before(s.Expires) {
			s.Expires = expires
		}
		if e.Kafka != nil {
			s.Kafka = s.Kafka.add(pod, e.Kafka)
		}
		if e.State == Closed {
			continue
		}
		switch {
		case e.State.rank() > s.State.rank():
			s.State, s.Pods, s.Since = e.State, []string{pod}, e.Since
		case e.State == s.State:
			s.Pods = append(s.Pods, pod)
			if e.Since.Before(s.Since) {
				s.Since = e.Since
			}
		}
	}
	return s
}

// Message describes a summary for a condition: which pods report what since when.
func (s Summary) Message(replicas int32) string {
	if s.State == Closed {
		return "no consumer reports an open circuit breaker"
	}
	what := "open: consumption is paused until the sink recovers"
	if s.State == HalfOpen {
		what = "half-open: probe deliveries are testing the sink"
	}
	pods := podList(s.Pods)
	return fmt.Sprintf("circuit breaker %s (%d of %d pods since %s: %s)",
		what, len(s.Pods), replicas, s.Since.UTC().Format(time.RFC3339), pods)
}
