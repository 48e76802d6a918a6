package render

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func durOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// PipelineThresholds are a pipeline's alert thresholds with the defaults applied.
type PipelineThresholds struct {
	MaxConsumerLag  int64
	MaxRetryBacklog int64
	For             time.Duration
}

// PipelineAlertThresholds returns spec.alerts of p with the defaults (1000, 1000, 5m) for unset fields.
func PipelineAlertThresholds(p *retryv1alpha1.ConsumerPipeline) PipelineThresholds {
	t := PipelineThresholds{MaxConsumerLag: DefaultMaxConsumerLag, MaxRetryBacklog: DefaultMaxRetryBacklog, For: DefaultPipelineAlertFor}
	if a := p.Spec.Alerts; a != nil {
		if a.MaxConsumerLag != nil {
			t.MaxConsumerLag = *a.MaxConsumerLag
		}
		if a.MaxRetryBacklog != nil {
			t.MaxRetryBacklog = *a.MaxRetryBacklog
		}
		t.For = durOr(a.For, t.For)
	}
	return t
}

// DeadLetterQueueThresholds are a DLQ's alert thresholds with the defaults applied.
type DeadLetterQueueThresholds struct {
	MaxMessages        int64
	MaxMessagesFor     time.Duration
	MaxGrowthPerMinute int64
	MaxGrowthFor       time.Duration
	MaxOldestAge       time.Duration
	// EscalateMessages and EscalateOldestAge are the third tier's thresholds.
	EscalateMessages  int64
	EscalateOldestAge time.Duration
}

// DeadLetterQueueAlertThresholds returns spec.alerts of d with the defaults (500 for 1h, 12 per
// minute for 10m, 24h; escalation at 1000 and 168h, or at twice maxMessages and maxOldestAge when
// those are already as large) for unset fields.
func DeadLetterQueueAlertThresholds(d *retryv1alpha1.DeadLetterQueue) DeadLetterQueueThresholds {
	t := DeadLetterQueueThresholds{
		MaxMessages: DefaultDLQMaxMessages, MaxMessagesFor: DefaultDLQMaxMessagesFor,
		MaxGrowthPerMinute: DefaultDLQMaxGrowthPerMin, MaxGrowthFor: DefaultDLQMaxGrowthFor,
		MaxOldestAge: DefaultDLQMaxOldestAge,
	}
	if a := d.Spec.Alerts; a != nil {
		if a.MaxMessages != nil {
			t.MaxMessages = *a.MaxMessages
		}
		if a.MaxGrowthPerMinute != nil {
			t.MaxGrowthPerMinute = int64(*a.MaxGrowthPerMinute)
		}
		t.MaxMessagesFor = durOr(a.MaxMessagesFor, t.MaxMessagesFor)
		t.MaxGrowthFor = durOr(a.MaxGrowthFor, t.MaxGrowthFor)
		t.MaxOldestAge = durOr(a.MaxOldestAge, t.MaxOldestAge)
	}
	t.EscalateMessages, t.EscalateOldestAge = DefaultDLQEscalateMessages, DefaultDLQEscalateOldestAge
	if t.MaxMessages >= t.EscalateMessages {
		t.EscalateMessages = 2 * t.MaxMessages
	}
	if t.MaxOldestAge >= t.EscalateOldestAge {
		t.EscalateOldestAge = 2 * t.MaxOldestAge
	}
	if a := d.Spec.Alerts; a != nil {
		if a.EscalateMessages != nil {
			t.EscalateMessages = *a.EscalateMessages
		}
		t.EscalateOldestAge = durOr(a.EscalateOldestAge, t.EscalateOldestAge)
	}
	return t
}
