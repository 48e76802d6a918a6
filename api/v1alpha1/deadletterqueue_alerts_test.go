package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// The escalation thresholds of spec.alerts must lie beyond the warning thresholds they escalate,
// counting the warning thresholds' API defaults (500, 24h) when only the escalation is set.
func TestEscalationThresholds(t *testing.T) {
	ns := newNamespace(t)
	const (
		messagesRule = "alerts.escalateMessages must be more than alerts.maxMessages"
		ageRule      = "alerts.escalateOldestAge must be longer than alerts.maxOldestAge"
	)
	for _, tc := range []struct {
		name   string
		alerts *retryv1alpha1.DeadLetterAlerts
		want   []string // substrings of the rejection; none: accepted
	}{
		{name: "none set", alerts: &retryv1alpha1.DeadLetterAlerts{}},
		{name: "seed 003's tier: 1000 dead letters, 7 days", alerts: &retryv1alpha1.DeadLetterAlerts{EscalateMessages: ptr.To[int64](1000), EscalateOldestAge: dp("168h")}},
		{name: "just above the warnings", alerts: &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](20), EscalateMessages: ptr.To[int64](21), MaxOldestAge: dp("1h"), EscalateOldestAge: dp("61m")}},
		{name: "a warning at 1000 or more without an escalation stays valid", alerts: &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](5000), MaxOldestAge: dp("200h")}},
		{name: "fractional durations compare as durations", alerts: &retryv1alpha1.DeadLetterAlerts{MaxOldestAge: dp("1.5h"), EscalateOldestAge: dp("91m")}},

		{name: "escalation at the warning count", alerts: &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](1000), EscalateMessages: ptr.To[int64](1000)}, want: []string{messagesRule}},
		{name: "escalation below the default warning count", alerts: &retryv1alpha1.DeadLetterAlerts{EscalateMessages: ptr.To[int64](300)}, want: []string{messagesRule, "500 by default"}},
		{name: "escalation at the warning age", alerts: &retryv1alpha1.DeadLetterAlerts{MaxOldestAge: dp("48h"), EscalateOldestAge: dp("48h")}, want: []string{ageRule}},
		{name: "escalation below the default warning age, in other units", alerts: &retryv1alpha1.DeadLetterAlerts{EscalateOldestAge: dp("1439m")}, want: []string{ageRule, "24h by default"}},
		{name: "both below", alerts: &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](50), EscalateMessages: ptr.To[int64](10), MaxOldestAge: dp("2h"), EscalateOldestAge: dp("1h")}, want: []string{messagesRule, ageRule}},
		{name: "escalation count below its minimum", alerts: &retryv1alpha1.DeadLetterAlerts{EscalateMessages: ptr.To[int64](1)}, want: []string{"spec.alerts.escalateMessages", "greater than or equal to 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := validDLQ(ns)
			q.Spec.Alerts = tc.alerts
			err := env.Client.Create(context.Background(), q)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want a rejection mentioning %q", tc.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

// The escalation fields have no API default: a queue that does not set them keeps them unset, and
// the operator computes them from the warning thresholds (render.DeadLetterQueueAlertThresholds).
func TestEscalationThresholdsAreNotDefaulted(t *testing.T) {
	q := validDLQ(newNamespace(t))
	q.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](5000)}
	if err := env.Client.Create(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if q.Spec.Alerts.EscalateMessages != nil || q.Spec.Alerts.EscalateOldestAge != nil {
		t.Errorf("escalation defaulted by the API server: %v, %v", q.Spec.Alerts.EscalateMessages, q.Spec.Alerts.EscalateOldestAge)
	}
}
