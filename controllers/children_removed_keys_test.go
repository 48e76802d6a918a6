package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// TestAPodAnnotationRemovedFromTheTemplateLeavesTheDeployment: the user removes an annotation from
// the pipeline's pod template; the Deployment's pod template loses it too (and the pods roll), while
// the Deployment keeps a label someone else put on it. Before the applied digest, the Deployment
// held every field rendered and was never applied again: the annotation stayed for ever.
func TestAPodAnnotationRemovedFromTheTemplateLeavesTheDeployment(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 3, time.Second, time.Minute))).To(Succeed())
	source := ns + ".annotated"
	createTopic(t, newKadm(t), source, 1)
	p := newPipeline(ns, "annotated", source, "policy", "dlq")
	p.Spec.Sink = nil
	p.Spec.Template = &retryv1alpha1.PodTemplate{
		Metadata: &retryv1alpha1.PodTemplateMetadata{Annotations: map[string]string{"team.example/keep": "1", "team.example/drop": "1"}},
		Spec:     corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	d := deploymentOf(p)
	podAnnotations := func() (map[string]string, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d)
		return d.Spec.Template.Annotations, err
	}
	g.Eventually(podAnnotations, oneResync+wait, poll).Should(And(HaveKey("team.example/drop"), HaveKey("team.example/keep")))
	g.Expect(d.Annotations).To(HaveKey(apply.AppliedAnnotation))

	// Someone else's label on the Deployment.
	g.Eventually(func() error {
		live := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), live); err != nil {
			return err
		}
		live.Labels["team.example/theirs"] = "1"
		return env.Client.Update(ctx, live)
	}, wait, poll).Should(Succeed())

	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) {
		delete(p.Spec.Template.Metadata.Annotations, "team.example/drop")
	})
	g.Eventually(podAnnotations, wait, poll).ShouldNot(HaveKey("team.example/drop"))
	g.Expect(d.Spec.Template.Annotations).To(And(HaveKeyWithValue("team.example/keep", "1"), HaveKey(render.AnnotationConfigHash)))
	g.Expect(d.Labels).To(HaveKeyWithValue("team.example/theirs", "1"), "another's label stays")
}
