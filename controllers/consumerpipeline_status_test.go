package controllers

import (
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/retry"
)

// planOf compiles a policy with exponential backoff.
func planOf(t *testing.T, attempts int32, initial, maxDelay time.Duration, jitter *retryv1alpha1.Jitter) retry.Plan {
	t.Helper()
	c, err := retry.Compile(policy.FromSpec(retryv1alpha1.RetryPolicySpec{
		MaxAttempts: attempts,
		Backoff: retryv1alpha1.Backoff{InitialDelay: metav1.Duration{Duration: initial}, Multiplier: "2", MaxDelay: metav1.Duration{Duration: maxDelay},
			Jitter: jitter, Cap: retryv1alpha1.CapAfterJitter},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c.Plan()
}

var topicNamePattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func TestRetryTierNames(t *testing.T) {
	type tier struct {
		name  string
		delay time.Duration
		n     int // attempts held
	}
	proportional := &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterProportional, MinPercent: ptr.To[int32](80), MaxPercent: ptr.To[int32](120)}
	for name, tc := range map[string]struct {
		naming retryv1alpha1.RetryTopicNaming
		plan   retry.Plan
		want   []tier
	}{
		"ByAttempt: one tier per retry": {
			naming: retryv1alpha1.NamingByAttempt, plan: planOf(t, 6, 2*time.Second, 300*time.Second, nil),
			want: []tier{{"orders.retry.1", 2 * time.Second, 1}, {"orders.retry.2", 4 * time.Second, 1}, {"orders.retry.3", 8 * time.Second, 1},
				{"orders.retry.4", 16 * time.Second, 1}, {"orders.retry.5", 32 * time.Second, 1}},
		},
		"no naming means ByAttempt": {
			naming: "", plan: planOf(t, 3, time.Second, 10*time.Second, nil),
			want: []tier{{"orders.retry.1", time.Second, 1}, {"orders.retry.2", 2 * time.Second, 1}},
		},
		"ByAttempt keeps a tier per retry even at the cap": {
			naming: retryv1alpha1.NamingByAttempt, plan: planOf(t, 5, time.Second, 2*time.Second, nil),
			want: []tier{{"orders.retry.1", time.Second, 1}, {"orders.retry.2", 2 * time.Second, 1}, {"orders.retry.3", 2 * time.Second, 1},
				{"orders.retry.4", 2 * time.Second, 1}},
		},
		"ByDelay: retries at the cap share one tier, as in Spring Kafka": {
			naming: retryv1alpha1.NamingByDelay, plan: planOf(t, 6, time.Second, 4*time.Second, nil),
			want: []tier{{"orders.retry.1s", time.Second, 1}, {"orders.retry.2s", 2 * time.Second, 1}, {"orders.retry.4s", 4 * time.Second, 3}},
		},
		"ByDelay: minutes and hours without zero units": {
			naming: retryv1alpha1.NamingByDelay, plan: planOf(t, 5, 10*time.Second, 2*time.Hour, &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterNone}),
			want: []tier{{"orders.retry.10s", 10 * time.Second, 1}, {"orders.retry.20s", 20 * time.Second, 1},
				{"orders.retry.40s", 40 * time.Second, 1}, {"orders.retry.1m20s", 80 * time.Second, 1}},
		},
		"ByDelay: sub-second and fractional delays": {
			naming: retryv1alpha1.NamingByDelay, plan: planOf(t, 4, 375*time.Millisecond, 10*time.Second, nil),
			want: []tier{{"orders.retry.375ms", 375 * time.Millisecond, 1}, {"orders.retry.750ms", 750 * time.Millisecond, 1},
				{"orders.retry.1.5s", 1500 * time.Millisecond, 1}},
		},
		"ByDelay: equal delays with different windows get a suffix to stay unique": {
			// Proportional jitter capped after it: 4s nominal with window [3.2s, 4s], then 4s with [4s, 4s].
			naming: retryv1alpha1.NamingByDelay, plan: planOf(t, 6, time.Second, 4*time.Second, proportional),
			want: []tier{{"orders.retry.1s", time.Second, 1}, {"orders.retry.2s", 2 * time.Second, 1}, {"orders.retry.4s", 4 * time.Second, 1},
				{"orders.retry.4s-4", 4 * time.Second, 2}},
		},
		"no retries: no tiers": {
			naming: retryv1alpha1.NamingByDelay, plan: planOf(t, 1, time.Second, time.Second, nil), want: []tier{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var got []tier
			for _, tr := range retryTiers("orders", tc.naming, tc.plan) {
				g.Expect(tr.Name).To(MatchRegexp(topicNamePattern.String()))
				got = append(got, tier{tr.Name, tr.Delay.Duration, len(tr.Attempts)})
			}
			if len(tc.want) == 0 {
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestPipelineTierNamesAndGroup(t *testing.T) {
	g := NewWithT(t)
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chat"}}
	p.Spec.Source.Topic = "s"
	g.Expect(createdTiers(p, nil)).To(BeEmpty())
	// The tiers the operator made are what it recorded, whatever status says; never the source.
	p.Status.Topics = &retryv1alpha1.PipelineTopics{Retries: []retryv1alpha1.RetryTopicStatus{{Name: "s.retry.9"}}}
	g.Expect(createdTiers(p, []string{"s", "s.retry.1", "s.retry.2", "s.retry.3"})).To(Equal([]string{"s.retry.1", "s.retry.2", "s.retry.3"}))

	g.Expect(consumerGroup(p)).To(Equal("team.chat"))
	p.Spec.Source.ConsumerGroup = "alice-orchestrator"
	g.Expect(consumerGroup(p)).To(Equal("alice-orchestrator"))
	g.Expect(retryDeletionPolicy(p)).To(Equal(retryv1alpha1.DeletionPolicyRetain))
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(retryDeletionPolicy(p)).To(Equal(retryv1alpha1.DeletionPolicyDelete))
}

func TestSetPipelineTopicsReady(t *testing.T) {
	long := strings.Repeat("x", maxConditionMessage+10)
	for name, tc := range map[string]struct {
		problems    problems
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		"no problem: True with the ready message": {nil, metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "source s has 3 partitions"},
		"one problem: False with its reason and message": {problems{{Reason: retryv1alpha1.ReasonSourceTopicMissing, Message: "no source"}},
			metav1.ConditionFalse, retryv1alpha1.ReasonSourceTopicMissing, "no source"},
		"several: the first reason, every message": {problems{{Reason: retryv1alpha1.ReasonTopicConflict, Message: "tier taken"}, {Reason: retryv1alpha1.ReasonKafkaUnauthorized, Message: "denied"}},
			metav1.ConditionFalse, retryv1alpha1.ReasonTopicConflict, "tier taken; denied"},
		"the same message twice is said once": {problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Message: "bad"}, {Reason: retryv1alpha1.ReasonReferenceNotFound, Message: "bad"}},
			metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, "bad"},
		"a long message is cut": {problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Message: long}},
			metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, truncate(long, maxConditionMessage)},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			// An earlier condition of another generation and status is replaced.
			st := &retryv1alpha1.ConsumerPipelineStatus{Conditions: []metav1.Condition{{Type: retryv1alpha1.ConditionTopicsReady, Status: metav1.ConditionUnknown,
				Reason: retryv1alpha1.ReasonReconciling, Message: "earlier", ObservedGeneration: 1}}}
			setPipelineTopicsReady(st, 2, tc.problems, "source s has 3 partitions")
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionTopicsReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect([]any{c.Status, c.Reason, c.Message, c.ObservedGeneration}).To(Equal([]any{tc.wantStatus, tc.wantReason, tc.wantMessage, int64(2)}))
			g.Expect(len(c.Message)).To(BeNumerically("<=", maxConditionMessage))
		})
	}
}

func TestSetPipelineReady(t *testing.T) {
	cond := func(condType string, status metav1.ConditionStatus, reason, msg string, gen int64) metav1.Condition {
		return metav1.Condition{Type: condType, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen}
	}
	topics := func(status metav1.ConditionStatus, reason, msg string, gen int64) []metav1.Condition {
		return []metav1.Condition{
			cond(retryv1alpha1.ConditionTopicsReady, status, reason, msg, gen),
			cond(retryv1alpha1.ConditionAlertsReady, metav1.ConditionTrue, reasonRulesApplied, "rules", 4),
			cond(retryv1alpha1.ConditionCircuitClosed, metav1.ConditionTrue, retryv1alpha1.ReasonCircuitClosed, "closed", 4),
			cond(retryv1alpha1.ConditionDeploymentReady, metav1.ConditionTrue, reasonAvailable, "2 of 2 pods ready", 4),
		}
	}
	for name, tc := range map[string]struct {
		conditions  []metav1.Condition
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		"all parts ready: the reason of the last, every message": {
			conditions: topics(metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "source s has 3 partitions", 4),
			wantStatus: metav1.ConditionTrue, wantReason: reasonAvailable, wantMessage: "source s has 3 partitions; rules; closed; 2 of 2 pods ready",
		},
		"a part not ready gives its reason and says which": {
			conditions: topics(metav1.ConditionFalse, retryv1alpha1.ReasonSourceTopicMissing, "no source", 4),
			wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonSourceTopicMissing, wantMessage: "TopicsReady: no source",
		},
		"the first part not ready wins": {
			conditions: []metav1.Condition{
				cond(retryv1alpha1.ConditionTopicsReady, metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "ok", 4),
				cond(retryv1alpha1.ConditionAlertsReady, metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, "bad", 4),
				cond(retryv1alpha1.ConditionDeploymentReady, metav1.ConditionFalse, reasonProgressing, "rolling", 4),
			},
			wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonInvalidSpec, wantMessage: "AlertsReady: bad",
		},
		"a Deployment still rolling out": {
			conditions: []metav1.Condition{
				cond(retryv1alpha1.ConditionTopicsReady, metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "ok", 4),
				cond(retryv1alpha1.ConditionAlertsReady, metav1.ConditionTrue, reasonRulesApplied, "rules", 4),
				cond(retryv1alpha1.ConditionCircuitClosed, metav1.ConditionTrue, retryv1alpha1.ReasonNoCircuitBreaker, "no breaker", 4),
				cond(retryv1alpha1.ConditionDeploymentReady, metav1.ConditionFalse, reasonProgressing, "rolling", 4),
			},
			wantStatus: metav1.ConditionFalse, wantReason: reasonProgressing, wantMessage: "DeploymentReady: rolling",
		},
		"an open circuit breaker: not ready, whatever the Deployment": {
			conditions: []metav1.Condition{
				cond(retryv1alpha1.ConditionTopicsReady, metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "ok", 4),
				cond(retryv1alpha1.ConditionAlertsReady, metav1.ConditionTrue, reasonRulesApplied, "rules", 4),
				cond(retryv1alpha1.ConditionCircuitClosed, metav1.ConditionFalse, retryv1alpha1.ReasonCircuitOpen, "circuit breaker open", 4),
				cond(retryv1alpha1.ConditionDeploymentReady, metav1.ConditionTrue, reasonAvailable, "2 of 2 pods ready", 4),
			},
			wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonCircuitOpen, wantMessage: "CircuitClosed: circuit breaker open",
		},
		"a part of an older generation is not known yet": {
			conditions: topics(metav1.ConditionTrue, retryv1alpha1.ReasonTopicsReady, "ok", 3),
			wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonReconciling, wantMessage: "TopicsReady not yet known",
		},
		"no part yet": {
			wantStatus: metav1.ConditionUnknown, wantReason: retryv1alpha1.ReasonReconciling, wantMessage: "TopicsReady not yet known",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &retryv1alpha1.ConsumerPipelineStatus{Conditions: tc.conditions}
			setPipelineReady(st, 4)
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.Message).To(Equal(tc.wantMessage))
			g.Expect(c.ObservedGeneration).To(Equal(int64(4)))
		})
	}
}

func TestDeploymentReadyCondition(t *testing.T) {
	deployment := func(replicas *int32, generation int64, st appsv1.DeploymentStatus) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-dispatcher", Generation: generation},
			Spec:       appsv1.DeploymentSpec{Replicas: replicas},
			Status:     st,
		}
	}
	stalled := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
		Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "orders-dispatcher-1" has timed out progressing.`}
	for name, tc := range map[string]struct {
		d           *appsv1.Deployment
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		"no Deployment": {nil, metav1.ConditionFalse, reasonProgressing, "does not exist yet"},
		"never seen by the Deployment controller (envtest)": {
			deployment(ptr.To[int32](2), 1, appsv1.DeploymentStatus{}),
			metav1.ConditionFalse, reasonProgressing, "waiting for the Deployment controller to see generation 1"},
		"a new spec not yet seen, though the old one is all ready": {
			deployment(ptr.To[int32](2), 3, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}),
			metav1.ConditionFalse, reasonProgressing, "generation 3"},
		"pods of the new template still coming": {
			deployment(ptr.To[int32](3), 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 1, ReadyReplicas: 3}),
			metav1.ConditionFalse, reasonProgressing, "1 of 3 pods run the current template"},
		"old pods still terminating": {
			deployment(ptr.To[int32](2), 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 2}),
			metav1.ConditionFalse, reasonProgressing, "1 old pods are being removed"},
		"rolled out but not all ready": {
			deployment(ptr.To[int32](2), 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 1}),
			metav1.ConditionFalse, reasonUnavailable, "1 of 2 pods ready"},
		"stalled rollout": {
			deployment(ptr.To[int32](2), 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1,
				Conditions: []appsv1.DeploymentCondition{stalled}}),
			metav1.ConditionFalse, reasonProgressDeadlineExceeded, "has timed out progressing"},
		"all ready": {
			deployment(ptr.To[int32](2), 2, appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}),
			metav1.ConditionTrue, reasonAvailable, "2 of 2 pods ready"},
		"replicas unset means one": {
			deployment(nil, 1, appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1}),
			metav1.ConditionTrue, reasonAvailable, "1 of 1 pods ready"},
		"scaling down": {
			deployment(ptr.To[int32](1), 3, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 4}),
			metav1.ConditionTrue, reasonAvailable, "4 pods ready, scaling down to 1"},
		"scaled to zero": {
			deployment(ptr.To[int32](0), 4, appsv1.DeploymentStatus{ObservedGeneration: 4}),
			metav1.ConditionTrue, reasonAvailable, "scaled to 0 replicas"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			c := deploymentReadyCondition(tc.d, 7)
			g.Expect(c.Type).To(Equal(retryv1alpha1.ConditionDeploymentReady))
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.Message).To(ContainSubstring(tc.wantMessage))
			g.Expect(c.ObservedGeneration).To(Equal(int64(7)), "the pipeline's generation, not the Deployment's")
		})
	}
}

func TestSetPipelineDeployment(t *testing.T) {
	g := NewWithT(t)
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x", "b": "y"}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 0, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3}}

	st := &retryv1alpha1.ConsumerPipelineStatus{}
	setPipelineDeployment(st, 2, d, nil)
	g.Expect(st.Replicas).To(Equal(int32(3)), "the pods the Deployment runs (scaling down from 3 to 2), as a Deployment's scale reports")
	g.Expect(st.Selector).To(Equal("app=x,b=y"))
	g.Expect(st.ReadyReplicas).To(Equal(ptr.To[int32](3)))
	g.Expect(meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady)).To(HaveField("Reason", reasonAvailable))

	// A problem (a spec error, say) wins over the Deployment's state; the figures stay.
	setPipelineDeployment(st, 3, d, problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: "bad volume"}})
	g.Expect(meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady)).To(And(
		HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec), HaveField("ObservedGeneration", int64(3))))
	g.Expect(st.ReadyReplicas).To(Equal(ptr.To[int32](3)))

	// No Deployment: no figures.
	setPipelineDeployment(st, 3, nil, problems{{Reason: reasonWaitingForTopics, Message: "later"}})
	g.Expect(st.Replicas).To(BeZero())
	g.Expect(st.ReadyReplicas).To(BeNil())
	g.Expect(st.Selector).To(BeEmpty())
}

func TestSetPipelineDeploymentKafka(t *testing.T) {
	since := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	available := metav1.Condition{Type: retryv1alpha1.ConditionDeploymentReady, Status: metav1.ConditionTrue, Reason: reasonAvailable, ObservedGeneration: 4}
	kafka := func(r circuitstate.KafkaReason, pods ...string) *circuitstate.Summary {
		return &circuitstate.Summary{State: circuitstate.Closed, Kafka: &circuitstate.KafkaSummary{Reason: r, Pods: pods, Since: since, Message: "the broker's error"}}
	}
	for _, tc := range []struct {
		name       string
		circuit    *circuitstate.Summary
		problems   problems
		wantReason string
		wantMsg    string
	}{
		{"reports not read", nil, nil, reasonAvailable, ""},
		{"no Kafka problem", &circuitstate.Summary{State: circuitstate.Open, Pods: []string{"p-a"}}, nil, reasonAvailable, ""},
		{"authentication", kafka(circuitstate.KafkaAuthentication, "p-abc"), nil, retryv1alpha1.ReasonKafkaAuthenticationFailed,
			"consumers cannot authenticate to Kafka (1 of 2 pods since 2026-11-26T08:00:00Z: p-abc): the broker's error"},
		{"TLS", kafka(circuitstate.KafkaTLS, "p-a", "p-b"), nil, retryv1alpha1.ReasonKafkaAuthenticationFailed,
			"consumers cannot connect to Kafka over TLS (2 of 2 pods since 2026-11-26T08:00:00Z: p-a, p-b): the broker's error"},
		{"authorization, more pods than replicas", kafka(circuitstate.KafkaAuthorization, "p-a", "p-b", "p-c"), nil, retryv1alpha1.ReasonKafkaUnauthorized,
			"consumers are not authorized by Kafka (3 of 3 pods since 2026-11-26T08:00:00Z: p-a, p-b, p-c): the broker's error"},
		{"a problem applying the Deployment stays", kafka(circuitstate.KafkaAuthentication, "p-a"),
			problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: "bad volume"}}, reasonAvailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 4}, Spec: retryv1alpha1.ConsumerPipelineSpec{Replicas: ptr.To[int32](2)}}
			st := &retryv1alpha1.ConsumerPipelineStatus{Conditions: []metav1.Condition{available}}
			setPipelineDeploymentKafka(st, p, pipelineChildren{circuit: tc.circuit, deploymentProblems: tc.problems})
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady)
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.ObservedGeneration).To(Equal(int64(4)))
			if tc.wantMsg != "" {
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Message).To(Equal(tc.wantMsg))
			}
		})
	}
}
