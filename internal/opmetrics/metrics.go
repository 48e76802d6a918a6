package opmetrics

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the operator's collectors. The manager registers them once on controller-runtime's
// registry (sigs.k8s.io/controller-runtime/pkg/metrics.Registry), which its /metrics endpoint serves,
// and the controllers set them whenever they refresh a resource's status and delete them when the
// resource is deleted.
//
// Only the leader sets values: controller-runtime stops a replica that loses its lease, so a former
// leader's stale series disappear with its pod. The alert rules aggregate with max by (namespace,
// <kind>) anyway, so a brief overlap during a hand-over raises no duplicate alert.
type Metrics struct {
	DeadLetterQueueMessages               *prometheus.GaugeVec
	DeadLetterQueueOldestMessageTimestamp *prometheus.GaugeVec
	DeadLetterQueueMessagesByReason       *prometheus.GaugeVec
	ConsumerPipelineConsumerLag           *prometheus.GaugeVec
	ConsumerPipelineRetryBacklog          *prometheus.GaugeVec
	ConsumerPipelineDueLag                *prometheus.GaugeVec
	ConsumerPipelineDeadLetterMessages    *prometheus.GaugeVec
	ConsumerPipelineReadyReplicas         *prometheus.GaugeVec
	ConsumerPipelineCircuitState          *prometheus.GaugeVec
	RetryPolicyDeadLetterMessages         *prometheus.GaugeVec

	counters actionCounters
}

// Register creates the collectors of All and registers them on reg. A collector that reg already
// holds (Register called again on the same registry, as envtest suites that start several managers
// do) is reused, so every Metrics of one registry shares the same series.
func Register(reg prometheus.Registerer) (*Metrics, error) {
	vecs := make(map[string]*prometheus.GaugeVec, len(All))
	for _, d := range All {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: d.Name, Help: d.Help}, d.Labels)
		if err := reg.Register(v); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("registering %s: %w", d.Name, err)
			}
			existing, ok := are.ExistingCollector.(*prometheus.GaugeVec)
			if !ok {
				return nil, fmt.Errorf("registering %s: a collector of another type is registered under that name", d.Name)
			}
			v = existing
		}
		vecs[d.Name] = v
	}
	counters, err := registerActionCounters(reg)
	if err != nil {
		return nil, err
	}
	return &Metrics{
		counters:                              counters,
		DeadLetterQueueMessages:               vecs[DeadLetterQueueMessages],
		DeadLetterQueueOldestMessageTimestamp: vecs[DeadLetterQueueOldestMessageTimestamp],
		DeadLetterQueueMessagesByReason:       vecs[DeadLetterQueueMessagesByReason],
		ConsumerPipelineConsumerLag:           vecs[ConsumerPipelineConsumerLag],
		ConsumerPipelineRetryBacklog:          vecs[ConsumerPipelineRetryBacklog],
		ConsumerPipelineDueLag:                vecs[ConsumerPipelineDueLag],
		ConsumerPipelineDeadLetterMessages:    vecs[ConsumerPipelineDeadLetterMessages],
		ConsumerPipelineReadyReplicas:         vecs[ConsumerPipelineReadyReplicas],
		ConsumerPipelineCircuitState:          vecs[ConsumerPipelineCircuitState],
		RetryPolicyDeadLetterMessages:         vecs[RetryPolicyDeadLetterMessages],
	}, nil
}

// DeadLetterQueueFigures are the live figures of a DeadLetterQueue.
type DeadLetterQueueFigures struct {
	// Messages is the number of dead letters held.
	Messages int64
	// Oldest is the timestamp of the oldest dead letter held; the zero time (an empty queue) removes
	// the series, so that an age alert never sees a timestamp of 0.
	Oldest time.Time
	// ByReason counts the dead letters held by reason. Reasons absent from the map lose their series.
	ByReason map[string]int64
}

// SetDeadLetterQueue sets the figures of the DeadLetterQueue namespace/name.
func (m *Metrics) SetDeadLetterQueue(namespace, name string, f DeadLetterQueueFigures) {
	m.DeadLetterQueueMessages.WithLabelValues(namespace, name).Set(float64(f.Messages))
	if f.Oldest.IsZero() || f.Messages == 0 {
		m.DeadLetterQueueOldestMessageTimestamp.DeleteLabelValues(namespace, name)
	} else {
		m.DeadLetterQueueOldestMessageTimestamp.WithLabelValues(namespace, name).Set(float64(f.Oldest.UnixMilli()) / 1000)
	}
	m.DeadLetterQueueMessagesByReason.DeletePartialMatch(prometheus.Labels{LabelNamespace: namespace, LabelDeadLetterQueue: name})
	reasons := make([]string, 0, len(f.ByReason))
	for r := range f.ByReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		m.DeadLetterQueueMessagesByReason.WithLabelValues(namespace, name, r).Set(float64(f.ByReason[r]))
	}
}

// DeleteDeadLetterQueue removes every series of the DeadLetterQueue namespace/name.
func (m *Metrics) DeleteDeadLetterQueue(namespace, name string) {
	m.DeadLetterQueueMessages.DeleteLabelValues(namespace, name)
	m.DeadLetterQueueOldestMessageTimestamp.DeleteLabelValues(namespace, name)
	m.DeadLetterQueueMessagesByReason.DeletePartialMatch(prometheus.Labels{LabelNamespace: namespace, LabelDeadLetterQueue: name})
}

// ConsumerPipelineFigures are the live figures of a ConsumerPipeline. A nil field is unknown (the
// broker was unreachable, the Deployment does not exist yet) and removes its series, so that an alert
// never fires on a stale value.
type ConsumerPipelineFigures struct {
	ConsumerLag        *int64
	RetryBacklog       *int64
	DueLag             *int64
	DeadLetterMessages *int64
	ReadyReplicas      *int32
	// Circuit is the circuit breaker state: "Closed", "HalfOpen", "Open" or "" (none).
	Circuit string
}

// SetConsumerPipeline sets the figures of the ConsumerPipeline namespace/name.
func (m *Metrics) SetConsumerPipeline(namespace, name string, f ConsumerPipelineFigures) {
	set := func(v *prometheus.GaugeVec, x *int64) {
		if x == nil {
			v.DeleteLabelValues(namespace, name)
			return
		}
		v.WithLabelValues(namespace, name).Set(float64(*x))
	}
	set(m.ConsumerPipelineConsumerLag, f.ConsumerLag)
	set(m.ConsumerPipelineRetryBacklog, f.RetryBacklog)
	set(m.ConsumerPipelineDueLag, f.DueLag)
	set(m.ConsumerPipelineDeadLetterMessages, f.DeadLetterMessages)
	if f.ReadyReplicas == nil {
		set(m.ConsumerPipelineReadyReplicas, nil)
	} else {
		r := int64(*f.ReadyReplicas)
		set(m.ConsumerPipelineReadyReplicas, &r)
	}
	set(m.ConsumerPipelineCircuitState, circuitValue(f.Circuit))
}

// circuitValue is the gauge value of a circuit state, nil for none.
func circuitValue(state string) *int64 {
	var v int64
	switch state {
	case "Closed":
	case "HalfOpen":
		v = 1
	case "Open":
		v = 2
	default:
		return nil
	}
	return &v
}

// DeleteConsumerPipeline removes every series of the ConsumerPipeline namespace/name.
func (m *Metrics) DeleteConsumerPipeline(namespace, name string) {
	for _, v := range []*prometheus.GaugeVec{m.ConsumerPipelineConsumerLag, m.ConsumerPipelineRetryBacklog, m.ConsumerPipelineDueLag, m.ConsumerPipelineDeadLetterMessages, m.ConsumerPipelineReadyReplicas, m.ConsumerPipelineCircuitState} {
		v.DeleteLabelValues(namespace, name)
	}
}

// SetRetryPolicy sets the dead letters held from the pipelines that use the RetryPolicy
// namespace/name.
func (m *Metrics) SetRetryPolicy(namespace, name string, deadLetterMessages int64) {
	m.RetryPolicyDeadLetterMessages.WithLabelValues(namespace, name).Set(float64(deadLetterMessages))
}

// DeleteRetryPolicy removes every series of the RetryPolicy namespace/name.
func (m *Metrics) DeleteRetryPolicy(namespace, name string) {
	m.RetryPolicyDeadLetterMessages.DeleteLabelValues(namespace, name)
}
