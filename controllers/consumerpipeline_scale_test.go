package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// The scale subresource: what kubectl scale, an HPA or a KEDA ScaledObject write. The operator
// follows spec.replicas in the Deployment and never writes spec.replicas itself.

const scaler = "test-scaler"

// scaleTo sets the pipeline's replicas through its scale subresource, as kubectl scale does.
func scaleTo(t *testing.T, p *retryv1alpha1.ConsumerPipeline, replicas int32) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		sc := &autoscalingv1.Scale{}
		if err := env.Client.SubResource("scale").Get(context.Background(), p, sc); err != nil {
			return err
		}
		sc.Spec.Replicas = replicas
		return env.Client.SubResource("scale").Update(context.Background(), p, client.WithSubResourceBody(sc), client.FieldOwner(scaler))
	}, wait, poll).Should(Succeed())
}

// specManagers are the field managers that own a field under spec of obj.
func specManagers(obj client.Object) []string {
	var out []string
	for _, m := range obj.GetManagedFields() {
		if m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:spec"`) {
			out = append(out, m.Manager)
		}
	}
	return out
}

func TestPipelineScaleSubresourceIsFollowedAndNeverWrittenBack(t *testing.T) {
	g := NewWithT(t)
	p, rp, _ := childPipeline(t)
	d := deploymentOf(p)
	replicas := func() (*int32, error) {
		_, err := getter(d)()
		return d.Spec.Replicas, err
	}
	g.Eventually(replicas, wait, poll).Should(Equal(ptr.To[int32](1)))

	scaleTo(t, p, 3)
	g.Eventually(replicas, wait, poll).Should(Equal(ptr.To[int32](3)))

	// The scale subresource reports the Deployment's pod selector, which selects the pods it runs.
	sc := &autoscalingv1.Scale{}
	g.Eventually(func() (string, error) {
		err := env.Client.SubResource("scale").Get(context.Background(), p, sc)
		return sc.Status.Selector, err
	}, wait, poll).ShouldNot(BeEmpty())
	sel, err := labels.Parse(sc.Status.Selector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue(), "selector %q, pod labels %v", sc.Status.Selector, d.Spec.Template.Labels)
	g.Expect(sel.Matches(labels.Set(render.SelectorLabels(p)))).To(BeTrue())
	g.Expect(sc.Spec.Replicas).To(Equal(int32(3)))

	// Across resyncs: the pipeline's spec keeps the scaler's value at the same generation (the
	// operator wrote nothing to it), and the Deployment is not written at all.
	g.Expect(getter(p)()).Error().NotTo(HaveOccurred())
	generation := p.Generation
	g.Expect(p.Spec.Replicas).To(Equal(ptr.To[int32](3)))
	g.Expect(specManagers(p)).NotTo(ContainElement(fieldManager), "the operator owns no field of the pipeline's spec")
	g.Expect(getter(d)()).Error().NotTo(HaveOccurred())
	deployed := d.ResourceVersion
	type seen struct {
		generation      int64
		replicas        int32
		deployedVersion string
		deployed        int32
	}
	world := func() (seen, error) {
		if _, err := getter(p)(); err != nil {
			return seen{}, err
		}
		if _, err := getter(d)(); err != nil {
			return seen{}, err
		}
		return seen{p.Generation, ptr.Deref(p.Spec.Replicas, -1), d.ResourceVersion, ptr.Deref(d.Spec.Replicas, -1)}, nil
	}
	holdsThroughResync(t, p, world, Equal(seen{generation, 3, deployed, 3}), "a resync wrote the pipeline or its Deployment")

	// A rollout (a policy change rolls the config hash) keeps the scaler's replicas.
	before := d.Spec.Template.Annotations[render.AnnotationConfigHash]
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) {
		rp.Spec.Backoff.InitialDelay = metav1.Duration{Duration: 3 * time.Second}
	})
	g.Eventually(func() (string, error) {
		_, err := getter(d)()
		return d.Spec.Template.Annotations[render.AnnotationConfigHash], err
	}, wait, poll).ShouldNot(Equal(before))
	g.Expect(d.Spec.Replicas).To(Equal(ptr.To[int32](3)))
	g.Expect(getter(p)()).Error().NotTo(HaveOccurred())
	g.Expect(p.Generation).To(Equal(generation), "the operator wrote the pipeline's spec")
	g.Expect(p.Spec.Replicas).To(Equal(ptr.To[int32](3)))
	g.Expect(specManagers(p)).NotTo(ContainElement(fieldManager))

	// Scaled down to zero and up again, the Deployment follows each time.
	scaleTo(t, p, 0)
	g.Eventually(replicas, wait, poll).Should(Equal(ptr.To[int32](0)))
	scaleTo(t, p, 2)
	g.Eventually(replicas, wait, poll).Should(Equal(ptr.To[int32](2)))
}
