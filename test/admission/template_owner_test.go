package admission

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A pipeline with a template runs its author's pods; a user who may edit pipelines but not create
// Deployments may not change how many of those pods run (spec.replicas) nor which Kafka cluster
// they reach with the credentials they mount (spec.kafka), but may still change the rest (labels).
func TestTemplatePolicyKeepsReplicasAndKafkaToDeployers(t *testing.T) {
	env := policyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin := env.Client
	namespace(ctx, t, admin, "owned", nil)
	refusedByThePolicy(ctx, t, admin, pipeline("owned", "probe", privilegedPod()), "a privileged template is refused")
	deployer := user(ctx, t, env, "owned", "owned-deployer", []rbacv1.PolicyRule{pipelineRule, deploymentRule})
	editor := user(ctx, t, env, "owned", "owned-editor", []rbacv1.PolicyRule{pipelineRule})
	expectAllowed(t, create(ctx, deployer, pipeline("owned", "made-by-deployer", plainPod())))

	edit := func(c client.Client, change func(u *unstructured.Unstructured)) error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(pipeline("owned", "x", nil).GroupVersionKind())
		if err := admin.Get(ctx, client.ObjectKey{Namespace: "owned", Name: "made-by-deployer"}, u); err != nil {
			t.Fatal(err)
		}
		change(u)
		return c.Update(ctx, u, client.DryRunAll)
	}
	replicas := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(50), "spec", "replicas")
	}
	kafka := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, map[string]any{"bootstrapServers": []any{"elsewhere.example:9092"}}, "spec", "kafka")
	}
	labels := func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "orders"}) }

	expectDenied(t, edit(editor, replicas), "owned-editor may not create Deployments in namespace owned", "spec.replicas")
	expectDenied(t, edit(editor, kafka), "owned-editor may not create Deployments in namespace owned", "spec.kafka")
	expectAllowed(t, edit(editor, labels))
	expectAllowed(t, edit(deployer, replicas))
	expectAllowed(t, edit(deployer, kafka))
}
