package extmetrics_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/extmetrics"
	"github.com/retryops/retry-operator/internal/render"
)

// A pipeline named exactly like another's shortened label (a name too long for a label value is
// cut with a hash) is a different pipeline: the HorizontalPodAutoscaler of each, asking with the
// selector it is rendered with, reads its own due lag only, never the sum of both.
func TestTheSelectorOfEachPipelineMatchesItAlone(t *testing.T) {
	g := NewWithT(t)
	long := strings.Repeat("q", 100)
	short := render.ExternalMetricLabels(long)[render.ExternalMetricPipelineLabel]
	g.Expect(len(short)).To(BeNumerically("<=", 63))
	ps := []*retryv1alpha1.ConsumerPipeline{pipeline("shop", long, ptr.To[int64](10)), pipeline("shop", short, ptr.To[int64](5000)),
		pipeline("shop", "orders", ptr.To[int64](3))}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme())
	for _, p := range ps {
		c = c.WithObjects(p)
	}
	s := &extmetrics.Storage{Reader: c.Build()}
	ctx := genericapirequest.WithNamespace(context.Background(), "shop")
	for _, p := range ps {
		p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4}
		h := render.HorizontalPodAutoscaler(p, render.AutoscalingOf(p, 0))
		sel, err := metav1.LabelSelectorAsSelector(h.Spec.Metrics[0].External.Metric.Selector)
		g.Expect(err).NotTo(HaveOccurred())
		obj, err := s.List(ctx, &metainternalversion.ListOptions{LabelSelector: sel})
		g.Expect(err).NotTo(HaveOccurred())
		var got []int64
		for _, v := range obj.(*emv1beta1.ExternalMetricValueList).Items {
			got = append(got, v.Value.Value())
		}
		g.Expect(got).To(Equal([]int64{*p.Status.DueLag}), "the autoscaler of %s (selector %s)", p.Name, sel)
	}
}
