package opmetrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Counters of dead-letter actions (DeadLetterAction), beside the gauges of All.
const (
	// DeadLetterActions counts the dead-letter actions that ended (labels action: Replay, Resolve,
	// Ignore, Purge; result: Succeeded, DryRun, Failed).
	DeadLetterActions = "retryops_deadletter_actions_total"
	// DeadLetterActionRecords counts the dead letters actions acted on: replayed, resolved, ignored
	// or purged (label action); dry runs count none.
	DeadLetterActionRecords = "retryops_deadletter_action_records_total"
)

// actionCounters are the counters of dead-letter actions.
type actionCounters struct {
	actions, records *prometheus.CounterVec
}

// registerCounter registers v on reg, or returns the counter reg already holds under its name.
func registerCounter(reg prometheus.Registerer, v *prometheus.CounterVec, name string) (*prometheus.CounterVec, error) {
	err := reg.Register(v)
	if err == nil {
		return v, nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return nil, fmt.Errorf("registering %s: %w", name, err)
	}
	existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
	if !ok {
		return nil, fmt.Errorf("registering %s: a collector of another type is registered under that name", name)
	}
	return existing, nil
}

func registerActionCounters(reg prometheus.Registerer) (actionCounters, error) {
	var c actionCounters
	var err error
	c.actions, err = registerCounter(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: DeadLetterActions,
		Help: "Dead-letter actions (DeadLetterAction) that ended, by action and result."}, []string{"action", "result"}), DeadLetterActions)
	if err != nil {
		return c, err
	}
	c.records, err = registerCounter(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: DeadLetterActionRecords,
		Help: "Dead letters replayed, resolved, ignored or purged by actions, by action."}, []string{"action"}), DeadLetterActionRecords)
	return c, err
}

// CountDeadLetterAction records an action that ended with result (Succeeded, DryRun or Failed)
// after acting on records dead letters. A nil Metrics counts nothing.
func (m *Metrics) CountDeadLetterAction(action, result string, records int64) {
	if m == nil || m.counters.actions == nil {
		return
	}
	m.counters.actions.WithLabelValues(action, result).Inc()
	if result == "Succeeded" && records > 0 {
		m.counters.records.WithLabelValues(action).Add(float64(records))
	}
}
