package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// pipelineConditions are the conditions Ready summarises, in order. DeploymentReady and AlertsReady
// join when their steps exist.
var pipelineConditions = []string{v1.ConditionTopicsReady}

// pipelineStatus rebuilds a pipeline's status from what the reconcile saw. Fields owned by later
// work (replicas, lag, backlog, circuit) are carried over untouched.
func pipelineStatus(s *pipelineScope) v1.ConsumerPipelineStatus {
	p := s.p
	st := *p.Status.DeepCopy()
	st.ObservedGeneration = p.Generation
	st.ConsumerGroup = consumerGroup(p)
	setPipelineTopics(&st, s)
	setPipelineTopicsReady(&st, p.Generation, s.topicProblems, pipelineTopicsMessage(st.Topics))
	setPipelineReady(&st, p.Generation)
	return st
}

// setPipelineTopics writes the topics: the source and its partitions, the retry tiers with their
// delays and partitions, the tiers no longer used, and the dead letter topic.
func setPipelineTopics(st *v1.ConsumerPipelineStatus, s *pipelineScope) {
	t := &v1.PipelineTopics{
		Source:           string(s.p.Spec.Source.Topic),
		SourcePartitions: s.sourcePartitions,
		Retries:          s.retries,
		UnusedRetries:    s.unused,
		DeadLetter:       s.deadLetter,
	}
	if len(t.Retries) == 0 {
		t.Retries = nil
	}
	if len(t.UnusedRetries) == 0 {
		t.UnusedRetries = nil
	}
	st.Topics = t
}

// setPipelineTopicsReady sets TopicsReady: True with reason TopicsReady when the topic steps met no
// problem, else False with the reason of the first problem and every problem's message.
func setPipelineTopicsReady(st *v1.ConsumerPipelineStatus, generation int64, ps problems, readyMessage string) {
	meta.SetStatusCondition(&st.Conditions, ps.condition(v1.ConditionTopicsReady, generation, v1.ReasonTopicsReady, readyMessage))
}

// setPipelineReady sets Ready from the conditions it summarises: False (or Unknown) like the first
// of them that is not True, with its reason and its message prefixed by its type; True when all are,
// with the reason of the last one and their messages.
func setPipelineReady(st *v1.ConsumerPipelineStatus, generation int64) {
	c := metav1.Condition{Type: v1.ConditionReady, ObservedGeneration: generation, Status: metav1.ConditionTrue}
	for _, t := range pipelineConditions {
		sub := meta.FindStatusCondition(st.Conditions, t)
		switch {
		case sub == nil || sub.ObservedGeneration != generation:
			c.Status, c.Reason, c.Message = metav1.ConditionUnknown, v1.ReasonReconciling, t+" not yet known"
		case sub.Status != metav1.ConditionTrue:
			c.Status, c.Reason, c.Message = sub.Status, sub.Reason, t+": "+sub.Message
		default:
			c.Reason = sub.Reason
			if c.Message != "" {
				c.Message += "; "
			}
			c.Message += sub.Message
			continue
		}
		break
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// pipelineTopicsMessage describes ready topics.
func pipelineTopicsMessage(t *v1.PipelineTopics) string {
	if t == nil {
		return ""
	}
	msg := fmt.Sprintf("source %s has %d partitions; %d retry topics", t.Source, t.SourcePartitions, len(t.Retries))
	if t.DeadLetter != "" {
		msg += "; dead letters go to " + t.DeadLetter
	}
	return msg
}
