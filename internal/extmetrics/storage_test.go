package extmetrics_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/extmetrics"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
)

var _ dlqapi.Group = &extmetrics.Group{}

func pipeline(ns, name string, dueLag *int64) *retryv1alpha1.ConsumerPipeline {
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	p.Status.DueLag = dueLag
	return p
}

func TestTheMetricIsTheOneTheAutoscalerAsksFor(t *testing.T) {
	g := NewWithT(t)
	g.Expect(extmetrics.Metric).To(Equal(render.ExternalMetricDueLag))
	g.Expect(extmetrics.Metric).To(Equal(opmetrics.ConsumerPipelineDueLag))
	g.Expect(render.ExternalMetricPipelineLabel).To(Equal(opmetrics.LabelConsumerPipeline))
}

func TestList(t *testing.T) {
	long := strings.Repeat("p", 70)
	objs := []client.Object{
		pipeline("shop", "orders", ptr.To[int64](1234)),
		pipeline("shop", "payments", ptr.To[int64](0)),
		pipeline("shop", "fresh", nil),
		pipeline("shop", long, ptr.To[int64](7)),
		pipeline("other", "orders", ptr.To[int64](99)),
	}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	s := &extmetrics.Storage{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(objs...).Build(), Clock: clocktesting.NewFakePassiveClock(now)}
	sel := func(s string) labels.Selector {
		l, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cases := []struct {
		name       string
		namespace  string
		selector   labels.Selector
		namespaces []string
		// want are the values by pipeline label, in order.
		want []string
	}{
		{name: "a selector of one pipeline gives its value", namespace: "shop", selector: sel("consumerpipeline=orders"), want: []string{"orders=1234"}},
		{name: "no selector gives every pipeline with a due lag, sorted; one without is left out", namespace: "shop",
			want: []string{"orders=1234", "payments=0", render.ExternalMetricLabels(long)[render.ExternalMetricPipelineLabel] + "=7"}},
		{name: "a name too long for a label value is selected by its shortened label", namespace: "shop",
			selector: labels.SelectorFromSet(render.ExternalMetricLabels(long)), want: []string{render.ExternalMetricLabels(long)[render.ExternalMetricPipelineLabel] + "=7"}},
		{name: "a pipeline without a due lag yet is absent", namespace: "shop", selector: sel("consumerpipeline=fresh"), want: []string{}},
		{name: "another namespace's pipeline of the same name is its own", namespace: "other", selector: sel("consumerpipeline=orders"), want: []string{"other-orders=99"}},
		{name: "a namespace the manager does not watch has none", namespace: "other", namespaces: []string{"shop"}, want: []string{}},
		{name: "a selector on another label matches none", namespace: "shop", selector: sel("app=orders"), want: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s.Namespaces = tc.namespaces
			ctx := genericapirequest.WithNamespace(context.Background(), tc.namespace)
			obj, err := s.List(ctx, &metainternalversion.ListOptions{LabelSelector: tc.selector})
			g.Expect(err).NotTo(HaveOccurred())
			list := obj.(*emv1beta1.ExternalMetricValueList)
			got := []string{}
			for _, v := range list.Items {
				g.Expect(v.MetricName).To(Equal(extmetrics.Metric))
				g.Expect(v.Timestamp.Time).To(Equal(now))
				name := v.MetricLabels[render.ExternalMetricPipelineLabel]
				if name == render.ExternalMetricLabels(long)[render.ExternalMetricPipelineLabel] {
					g.Expect(v.MetricLabels).To(Equal(render.ExternalMetricLabels(long)))
				} else {
					g.Expect(v.MetricLabels).To(HaveLen(1))
				}
				if tc.namespace == "other" {
					name = "other-" + name
				}
				got = append(got, name+"="+v.Value.String())
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestListRefusesAListAcrossNamespaces(t *testing.T) {
	s := &extmetrics.Storage{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build()}
	_, err := s.List(context.Background(), &metainternalversion.ListOptions{})
	NewWithT(t).Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
}
