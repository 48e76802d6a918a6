package controllers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// maxPipelineNames bounds status.pipelineNames.
const maxPipelineNames = 20

// policyStatus rebuilds a RetryPolicy's status from its spec (compiled through cache) and the
// pipelines that use it. The conditions of the previous status are carried over so that transition
// times move only on change.
func policyStatus(p *retryv1alpha1.RetryPolicy, pipelines []retryv1alpha1.ConsumerPipeline, cache *policy.Cache) retryv1alpha1.RetryPolicyStatus {
	st := retryv1alpha1.RetryPolicyStatus{
		ObservedGeneration: p.Generation,
		Conditions:         append([]metav1.Condition(nil), p.Status.Conditions...),
	}
	setPolicyUsage(&st, pipelines)

	compiled, err := compilePolicy(cache, p)
	if err != nil {
		setPolicyReady(&st, p.Generation, err)
		setPolicyStalled(&st, p.Generation, err)
		return st
	}
	plan := compiled.Plan()
	setPolicySchedule(&st, plan)
	setPolicyReady(&st, p.Generation, nil)
	setPolicyStalled(&st, p.Generation, nil)
	return st
}

// setPolicyStalled sets Stalled: True with reason InvalidSpec while the spec does not compile (only a
// spec change can fix it), removed otherwise.
func setPolicyStalled(st *retryv1alpha1.RetryPolicyStatus, generation int64, specErr error) {
	var ps problems
	if specErr != nil {
		ps.add(&problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(specErr.Error(), maxConditionMessage)})
	}
	setStalled(&st.Conditions, generation, ps)
}

// setPolicyUsage fills in which pipelines use the policy and their dead letters.
func setPolicyUsage(st *retryv1alpha1.RetryPolicyStatus, pipelines []retryv1alpha1.ConsumerPipeline) {
	names := make([]string, 0, len(pipelines))
	var dead int64
	for i := range pipelines {
		names = append(names, pipelines[i].Name)
		dead += ptr.Deref(pipelines[i].Status.DeadLetterMessages, 0)
	}
	sort.Strings(names)
	st.Pipelines = ptr.To(int32(len(names)))
	if len(names) > maxPipelineNames {
		names = names[:maxPipelineNames]
	}
	if len(names) > 0 {
		st.PipelineNames = names
	}
	st.DeadLetterMessages = ptr.To(dead)
}

// setPolicySchedule writes the computed plan.
func setPolicySchedule(st *retryv1alpha1.RetryPolicyStatus, plan retry.Plan) {
	nominal := make([]string, 0, len(plan.Schedule))
	for _, s := range plan.Schedule {
		st.Schedule = append(st.Schedule, retryv1alpha1.ScheduledRetry{
			Attempt:  s.Attempt,
			Delay:    metav1.Duration{Duration: s.Nominal},
			Earliest: metav1.Duration{Duration: s.Earliest},
			Latest:   metav1.Duration{Duration: s.Latest},
			Tier:     s.Tier,
		})
		nominal = append(nominal, shortDuration(s.Nominal))
	}
	st.ScheduleSummary = scheduleSummary(nominal)
	if len(plan.Schedule) > 0 {
		st.TotalDelay = &retryv1alpha1.DelayBounds{
			Earliest: metav1.Duration{Duration: plan.TotalDelay.Earliest},
			Latest:   metav1.Duration{Duration: plan.TotalDelay.Latest},
		}
	}
}

// setPolicyReady sets the Ready condition: True when the spec compiled, False with reason InvalidSpec
// and the exact problem otherwise.
func setPolicyReady(st *retryv1alpha1.RetryPolicyStatus, generation int64, specErr error) {
	c := metav1.Condition{Type: retryv1alpha1.ConditionReady, ObservedGeneration: generation}
	switch {
	case specErr != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, truncate(specErr.Error(), maxConditionMessage)
	case len(st.Schedule) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, retryv1alpha1.ReasonValid, "no retries: a failed delivery goes to the dead letter queue at once"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, retryv1alpha1.ReasonValid
		c.Message = fmt.Sprintf("%d retries over %s to %s", len(st.Schedule),
			shortDuration(st.TotalDelay.Earliest.Duration), shortDuration(st.TotalDelay.Latest.Duration))
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// scheduleSummary joins the nominal delays, eliding the middle of long schedules to fit a column.
func scheduleSummary(nominal []string) string {
	if len(nominal) == 0 {
		return "none"
	}
	if len(nominal) > 8 {
		nominal = append(append(nominal[:4:4], "…"), nominal[len(nominal)-3:]...)
	}
	return strings.Join(nominal, " ")
}

// shortDuration prints a duration without zero units: 2s, 1m30s, 10m, 1h, 1.6s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
