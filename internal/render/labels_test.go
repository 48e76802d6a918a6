package render_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/retryops/retry-operator/internal/render"
)

// TestChildrenCarryTheOperatorsLabelsNotArgoCDs: every child carries the operator's own instance
// label (retry.retryops.dev/pipeline or retry.retryops.dev/deadletterqueue) and
// app.kubernetes.io/managed-by=retry-operator (what the manager's cache selects), and none carries
// app.kubernetes.io/instance, which Argo CD uses to track the objects of its Applications: an
// Application that syncs a ConsumerPipeline would otherwise take its children for its own and
// prune or flag them. The pods too: their labels are the Deployment's selector and ours, the user's
// template labels kept as they are.
func TestChildrenCarryTheOperatorsLabelsNotArgoCDs(t *testing.T) {
	check := func(t *testing.T, what string, labels map[string]string, instanceKey, instance string) {
		t.Helper()
		if v, ok := labels["app.kubernetes.io/instance"]; ok {
			t.Errorf("%s has app.kubernetes.io/instance=%s (Argo CD's tracking label)", what, v)
		}
		if labels[instanceKey] != instance {
			t.Errorf("%s: %s=%q, want %q", what, instanceKey, labels[instanceKey], instance)
		}
		if labels[render.LabelManagedBy] != render.LabelManagedByValue {
			t.Errorf("%s: %s=%q, want %q", what, render.LabelManagedBy, labels[render.LabelManagedBy], render.LabelManagedByValue)
		}
	}
	for name, mk := range map[string]func(*testing.T) *render.Inputs{
		"sink": sinkURIInputs, "secrets": sinkRefSecretsInputs, "template": templateMinimalInputs,
	} {
		t.Run(name, func(t *testing.T) {
			in := mk(t)
			p := in.Pipeline
			cm, err := render.ConfigMap(in)
			if err != nil {
				t.Fatal(err)
			}
			dep, err := render.Deployment(in, render.ConfigHash(cm))
			if err != nil {
				t.Fatal(err)
			}
			rule, err := render.PrometheusRule(in)
			if err != nil {
				t.Fatal(err)
			}
			alerts, err := render.AlertConfigMap(in)
			if err != nil {
				t.Fatal(err)
			}
			objs := []runtime.Object{cm, dep, rule, alerts, render.CircuitConfigMap(p), render.CircuitRole(p), render.CircuitRoleBinding(p)}
			if sa := render.ServiceAccount(p); sa != nil {
				objs = append(objs, sa)
			}
			for _, o := range objs {
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
				if err != nil {
					t.Fatal(err)
				}
				u := unstructured.Unstructured{Object: m}
				check(t, u.GetKind()+" "+u.GetName(), u.GetLabels(), render.LabelPipeline, p.Name)
			}
			if v, ok := dep.Spec.Template.Labels["app.kubernetes.io/instance"]; ok {
				t.Errorf("the pods have app.kubernetes.io/instance=%s", v)
			}
			if dep.Spec.Selector.MatchLabels[render.LabelPipeline] != p.Name || len(dep.Spec.Selector.MatchLabels) != 1 {
				t.Errorf("the Deployment's selector %v changed: it is immutable, existing Deployments must keep matching", dep.Spec.Selector.MatchLabels)
			}
		})
	}
	t.Run("deadletterqueue", func(t *testing.T) {
		in := &render.DeadLetterQueueInputs{DLQ: defaultDLQ()}
		rule, err := render.DeadLetterQueuePrometheusRule(in)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := render.DeadLetterQueueAlertConfigMap(in)
		if err != nil {
			t.Fatal(err)
		}
		check(t, "PrometheusRule", rule.GetLabels(), render.LabelDeadLetterQueue, in.DLQ.Name)
		check(t, "ConfigMap", cm.Labels, render.LabelDeadLetterQueue, in.DLQ.Name)
	})
}
