package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// onDefaultConnection reports whether a spec.kafka uses the operator's default connection.
func onDefaultConnection(spec *retryv1alpha1.KafkaConnection) bool {
	return spec == nil || len(spec.BootstrapServers) == 0
}

// reconcileIdentity finds how the pipeline's pods reach the default connection, when the pipeline or
// its queue is on it: the connection's TLS (CA bundle and server name, public, rendered into the
// ConfigMap) and, when it authenticates, the identity of the pipeline's namespace from its consumer
// Secret (kafkaspec.ResolveConsumerIdentity), never the operator's credentials. Without that Secret
// the pipeline waits with KafkaCredentialsMissing, and no config or Deployment is made for pods that
// could not connect (one that exists is left as it is, and the message says so); the pipeline is looked at again at the next resync (Secrets are not watched),
// so creating the Secret is enough.
//
// It returns how the pods reach the default connection (nil when neither the pipeline nor its queue
// is on it), and whether the identity they need is missing; the problem is recorded in ps.
func (r *ConsumerPipelineReconciler) reconcileIdentity(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, queue *retryv1alpha1.DeadLetterQueue, refused *problem, ps *problems) (dc *render.DefaultConnection, missing bool, err error) {
	if refused != nil || queue == nil || (!onDefaultConnection(p.Spec.Kafka) && !onDefaultConnection(queue.Spec.Kafka)) {
		return nil, false, nil //nolint:nilerr // a refused claim is the claims phase's problem: no identity for consumers that do not run
	}
	d := r.Kafka.Defaults
	dc = &render.DefaultConnection{}
	if t := d.TLS; t != nil {
		dc.TLS, dc.CAPEM, dc.ServerName, dc.ClientCert = true, t.CAPEM, t.ServerName, len(t.CertPEM) > 0
	}
	if d.SASL != nil {
		dc.SASLMechanism = retryv1alpha1.SASLMechanism(d.SASL.Mechanism)
	}
	id, err := kafkaspec.ResolveConsumerIdentity(ctx, r.Client, p.Namespace, d)
	var e *kafkaspec.Error
	switch {
	case errors.As(err, &e):
		kind := problemWaiting
		if !e.Missing {
			kind = problemUser // the manager's flags, not the namespace, lack something
		}
		msg := identityMessage(p, queue, e.Message)
		// A Secret deleted (or emptied) under a running pipeline: its Deployment is left alone.
		key := client.ObjectKey{Namespace: p.Namespace, Name: render.DeploymentName(p)}
		if d := (&appsv1.Deployment{}); apply.Cached(ctx, r.Client, key, d) != nil && metav1.IsControlledBy(d, p) {
			msg += "; until then the Deployment keeps its last config: its running pods keep the credentials they mounted, new pods cannot start"
		}
		ps.add(&problem{Reason: retryv1alpha1.ReasonKafkaCredentialsMissing, Kind: kind, Message: msg})
		return nil, true, nil
	case err != nil:
		return nil, false, recordProblem(ps, err)
	}
	if id != nil {
		rid := render.ConsumerIdentity(*id)
		dc.Identity = &rid
	}
	return dc, false, nil
}

// identityMessage says which object is on the default connection when only the pipeline's queue is:
// the pipeline's own spec.kafka already names servers, so the way out is the queue's.
func identityMessage(p *retryv1alpha1.ConsumerPipeline, queue *retryv1alpha1.DeadLetterQueue, msg string) string {
	if onDefaultConnection(p.Spec.Kafka) {
		return msg
	}
	const hint = "or set spec.kafka"
	if m, ok := strings.CutSuffix(msg, hint); ok {
		msg = m + "or set the DeadLetterQueue's spec.kafka"
	}
	return fmt.Sprintf("DeadLetterQueue %q is on the default Kafka connection: %s", queue.Name, msg)
}
