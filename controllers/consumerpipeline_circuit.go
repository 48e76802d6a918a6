package controllers

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// DefaultCircuitReportInterval is how often consumers repeat a circuit report that is not Closed;
// a report not repeated for circuitReportTTLFactor intervals is stale.
const (
	DefaultCircuitReportInterval = 30 * time.Second
	circuitReportTTLFactor       = 3
)

// The circuit breaker state travels from the consumers to status.circuit through the pipeline's
// circuit ConfigMap (sdk/circuitstate has the protocol and why it was chosen). The Access step
// applies what the consumers need for it: the ConfigMap, their ServiceAccount (unless the template
// names its own) and a Role and RoleBinding granting get and patch on that one ConfigMap. The
// Circuit step folds the fresh reports (pipelineChildren.circuit) and deletes the stale ones.

// reconcileAccess applies the consumers' ServiceAccount, circuit ConfigMap, Role and RoleBinding,
// and removes the pipeline's own ServiceAccount when the template came to name another. Problems
// are recorded in ps.
func (r *ConsumerPipelineReconciler) reconcileAccess(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, ps *problems) error {
	type child struct {
		desired client.Object
		live    client.Object
	}
	children := []child{
		{render.CircuitConfigMap(p), &corev1.ConfigMap{}},
		{render.CircuitRole(p), &rbacv1.Role{}},
		{render.CircuitRoleBinding(p), &rbacv1.RoleBinding{}},
	}
	if sa := render.ServiceAccount(p); sa != nil {
		children = append([]child{{sa, &corev1.ServiceAccount{}}}, children...)
	} else if err := r.deleteOwnServiceAccount(ctx, p); err != nil {
		return recordProblem(ps, err)
	}
	for _, c := range children {
		live := apply.Cached(ctx, r.Client, client.ObjectKeyFromObject(c.desired), c.live)
		_, applied, err := apply.Owned(ctx, r.Client, r.Applied, p, c.desired, live)
		if err != nil {
			if err := recordProblem(ps, childProblem(err)); err != nil {
				return err
			}
			continue
		}
		if applied {
			ctrl.LoggerFrom(ctx).Info("Applied consumer access object", "consumerPipeline", klog.KObj(p),
				"kind", c.desired.GetObjectKind().GroupVersionKind().Kind, "name", c.desired.GetName())
		}
	}
	return nil
}

// deleteOwnServiceAccount deletes the pipeline's ServiceAccount when it made one.
func (r *ConsumerPipelineReconciler) deleteOwnServiceAccount(ctx context.Context, p *retryv1alpha1.ConsumerPipeline) error {
	sa := &corev1.ServiceAccount{}
	key := types.NamespacedName{Namespace: p.Namespace, Name: render.ServiceAccountName(p)}
	if apply.Cached(ctx, r.Client, key, sa) == nil || !metav1.IsControlledBy(sa, p) {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Deleting the consumers' ServiceAccount: the template names its own", "consumerPipeline", klog.KObj(p), "serviceAccount", sa.Name)
	return client.IgnoreNotFound(r.Delete(ctx, sa, client.Preconditions{UID: &sa.UID}))
}

// circuitTTL is how long a report counts without being repeated.
func (r *ConsumerPipelineReconciler) circuitTTL() time.Duration {
	interval := r.CircuitReportInterval
	if interval <= 0 {
		interval = DefaultCircuitReportInterval
	}
	return circuitReportTTLFactor * interval
}

// readCircuit folds the consumers' reports (from the cache) and deletes the stale ones, so that a
// pod that vanished while its breaker was open leaves nothing behind.
func (r *ConsumerPipelineReconciler) readCircuit(ctx context.Context, p *retryv1alpha1.ConsumerPipeline) *circuitstate.Summary {
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: p.Namespace, Name: render.CircuitConfigMapName(p)}
	if apply.Cached(ctx, r.Client, key, cm) == nil || !metav1.IsControlledBy(cm, p) {
		// Not made yet (or not cached yet), or not ours (a conflict reported by reconcileAccess):
		// nobody can have reported, and another's ConfigMap is never read or changed.
		return &circuitstate.Summary{State: circuitstate.Closed}
	}
	sum := circuitstate.Fold(cm.Data, r.Clock.Now(), r.circuitTTL())
	if len(sum.Stale) == 0 {
		return &sum
	}
	data := make(map[string]any, len(sum.Stale))
	for _, k := range sum.Stale {
		data[k] = nil
	}
	patch, _ := json.Marshal(map[string]any{"data": data})
	if err := r.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(apply.FieldOwner)); err != nil {
		// The next reconcile tries again; stale entries never count meanwhile.
		ctrl.LoggerFrom(ctx).Info("Could not delete stale circuit reports", "consumerPipeline", klog.KObj(p), "error", err.Error())
		return &sum
	}
	ctrl.LoggerFrom(ctx).Info("Deleted stale circuit reports", "consumerPipeline", klog.KObj(p), "pods", sum.Stale)
	return &sum
}

// circuitRequeue is how long until the first fresh report goes stale, zero when none is fresh.
func (r *ConsumerPipelineReconciler) circuitRequeue(circuit *circuitstate.Summary) time.Duration {
	if circuit == nil || circuit.Expires.IsZero() {
		return 0
	}
	return max(circuit.Expires.Sub(r.Clock.Now()), time.Second)
}

// setPipelineDeploymentKafka makes DeploymentReady False while fresh reports say Kafka refuses the
// consumers: KafkaAuthenticationFailed (credentials or TLS) or KafkaUnauthorized (ACLs), naming the
// pods, since when and the broker's error. It says more than the Deployment's status (pods not
// ready) and less than a problem applying the Deployment, which it leaves in place.
func setPipelineDeploymentKafka(st *retryv1alpha1.ConsumerPipelineStatus, p *retryv1alpha1.ConsumerPipeline, kids pipelineChildren) {
	if kids.circuit == nil || kids.circuit.Kafka == nil || len(kids.deploymentProblems) > 0 {
		return
	}
	k := kids.circuit.Kafka
	reason := retryv1alpha1.ReasonKafkaAuthenticationFailed
	if k.Reason == circuitstate.KafkaAuthorization {
		reason = retryv1alpha1.ReasonKafkaUnauthorized
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: retryv1alpha1.ConditionDeploymentReady, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation,
		Reason: reason, Message: k.Text(max(render.Replicas(p), int32(len(k.Pods)))),
	})
}

// setPipelineCircuit writes status.circuit and the CircuitClosed condition. The state is reported
// only when the policy has a circuit breaker; while the policy is unknown (missing or invalid) the
// previous state is kept. The condition follows the reports: False while any consumer reports its
// breaker open or half-open.
func setPipelineCircuit(st *retryv1alpha1.ConsumerPipelineStatus, p *retryv1alpha1.ConsumerPipeline, policy *retryv1alpha1.RetryPolicy, circuit *circuitstate.Summary) {
	generation := p.Generation
	breaker := policy != nil && policy.Spec.CircuitBreaker != nil
	c := metav1.Condition{Type: retryv1alpha1.ConditionCircuitClosed, ObservedGeneration: generation}
	switch {
	case circuit == nil:
		// Not read this time: leave both as they were, at this generation.
		if old := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionCircuitClosed); old != nil {
			c = *old
			c.ObservedGeneration = generation
		} else {
			c.Status, c.Reason, c.Message = metav1.ConditionUnknown, retryv1alpha1.ReasonReconciling, "the consumers' reports were not read yet"
		}
	case policy != nil && !breaker:
		st.Circuit = ""
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, retryv1alpha1.ReasonNoCircuitBreaker, "RetryPolicy "+policy.Name+" has no circuit breaker"
	default:
		if breaker {
			st.Circuit = retryv1alpha1.CircuitState(circuit.State)
		}
		c.Message = circuit.Message(max(render.Replicas(p), int32(len(circuit.Pods))))
		switch circuit.State {
		case circuitstate.Open:
			c.Status, c.Reason = metav1.ConditionFalse, retryv1alpha1.ReasonCircuitOpen
		case circuitstate.HalfOpen:
			c.Status, c.Reason = metav1.ConditionFalse, retryv1alpha1.ReasonCircuitHalfOpen
		default:
			c.Status, c.Reason = metav1.ConditionTrue, retryv1alpha1.ReasonCircuitClosed
		}
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
