package controllers

import (
	"testing"

	"github.com/retryops/retry-operator/internal/kafkaspec"
)

func TestLedgerRole(t *testing.T) {
	queue := kafkaspec.Holder{Kind: "DeadLetterQueue", Namespace: "a", Name: "q", Topics: []string{"a.dlq", "a.dlq.state"}}
	pipeline := kafkaspec.Holder{Kind: "ConsumerPipeline", Namespace: "a", Name: "p", Topics: []string{"a.orders", "a.orders.retry.1", "a.orders.retry.2"}}
	tiersOnly := kafkaspec.Holder{Kind: "ConsumerPipeline", Namespace: "a", Name: "p", Topics: []string{"a.orders.retry.1"}}
	for name, tc := range map[string]struct {
		h       kafkaspec.Holder
		topic   string
		role    string
		allowed bool
	}{
		"a queue's topic":                                     {queue, "a.dlq", "dead-letter topic", false},
		"a queue's record of decisions":                       {queue, "a.dlq.state", "record of decisions", false},
		"a pipeline's source":                                 {pipeline, "a.orders", "source topic", true},
		"a pipeline's tier":                                   {pipeline, "a.orders.retry.2", "retry topic", false},
		"a tier of a pipeline that did not create its source": {tiersOnly, "a.orders.retry.1", "retry topic", false},
		"a record of an unknown kind":                         {kafkaspec.Holder{Kind: "unknown", Topics: []string{"x"}}, "x", "topic", false},
	} {
		t.Run(name, func(t *testing.T) {
			role, allowed := ledgerRole(tc.h, tc.topic)
			if role != tc.role || allowed != tc.allowed {
				t.Errorf("ledgerRole = %q, %v; want %q, %v", role, allowed, tc.role, tc.allowed)
			}
		})
	}
}
