package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// TestPipelineRelabelsAChildThatLostTheOperatorsLabel: the manager caches the owned kinds only with
// app.kubernetes.io/managed-by=retry-operator, so a child whose label someone removed vanishes from
// the cache. The pipeline still controls it: the operator reads it uncached, finds itself its
// controller, and applies it again, label included, instead of reporting a ChildConflict forever.
func TestPipelineRelabelsAChildThatLostTheOperatorsLabel(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 2, time.Second, 2*time.Second))).To(Succeed())
	p := newPipeline(ns, "relabel", ns+".relabel", "policy", dlq.Name)
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	d := deploymentOf(p)
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(d), d) }, wait, poll).Should(Succeed())
	g.Expect(d.Labels).To(HaveKeyWithValue(render.LabelManagedBy, render.LabelManagedByValue))

	patch := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`)
	g.Expect(env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch))).To(Succeed())
	g.Eventually(func() (map[string]string, error) {
		got := &appsv1.Deployment{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), got)
		return got.Labels, err
	}, wait, poll).Should(HaveKeyWithValue(render.LabelManagedBy, render.LabelManagedByValue))
	holdsThroughResync(t, p, pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), Not(HaveField("Reason", retryv1alpha1.ReasonChildConflict)))
}
