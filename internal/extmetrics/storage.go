package extmetrics

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
)

// Metric is the one metric served: a ConsumerPipeline's status.dueLag, under the name of the
// Prometheus gauge that exports the same figure.
const Metric = opmetrics.ConsumerPipelineDueLag

// Storage is the read-only REST storage of the metric: list only, namespaced.
type Storage struct {
	// Reader reads ConsumerPipelines (the manager's cache, which every replica keeps).
	Reader client.Reader
	// Namespaces, when not empty, are the only namespaces the manager watches (--watch-namespaces):
	// a pipeline elsewhere is not the operator's, and Reader, a cache of those namespaces, cannot
	// read it.
	Namespaces []string
	// Clock stamps the values (default the real clock).
	Clock clock.PassiveClock
}

var (
	_ rest.Storage              = &Storage{}
	_ rest.Scoper               = &Storage{}
	_ rest.Lister               = &Storage{}
	_ rest.SingularNameProvider = &Storage{}
)

// New implements rest.Storage.
func (s *Storage) New() runtime.Object { return &emv1beta1.ExternalMetricValue{} }

// Destroy implements rest.Storage.
func (s *Storage) Destroy() {}

// NewList implements rest.Lister.
func (s *Storage) NewList() runtime.Object { return &emv1beta1.ExternalMetricValueList{} }

// NamespaceScoped implements rest.Scoper.
func (s *Storage) NamespaceScoped() bool { return true }

// GetSingularName implements rest.SingularNameProvider: a metric has no singular.
func (s *Storage) GetSingularName() string { return Metric }

// List returns the metric's value for each ConsumerPipeline of the request's namespace whose
// labels (render.ExternalMetricLabels) the label selector matches. A pipeline whose status has no
// due lag yet is left out: its autoscaler then keeps the replicas it has rather than scale on a
// guess.
func (s *Storage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if ns == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s is listed per namespace: /apis/%s/%s/namespaces/<namespace>/%s",
			Metric, emv1beta1.GroupName, emv1beta1.SchemeGroupVersion.Version, Metric))
	}
	sel := labels.Everything()
	if opts != nil && opts.LabelSelector != nil {
		sel = opts.LabelSelector
	}
	out := &emv1beta1.ExternalMetricValueList{Items: []emv1beta1.ExternalMetricValue{}}
	if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, ns) {
		return out, nil
	}
	var pipelines retryv1alpha1.ConsumerPipelineList
	if err := s.Reader.List(ctx, &pipelines, client.InNamespace(ns)); err != nil {
		return nil, apierrors.NewServiceUnavailable("reading the ConsumerPipelines: " + err.Error())
	}
	now := metav1.NewTime(s.clock().Now())
	for i := range pipelines.Items {
		p := &pipelines.Items[i]
		if p.Status.DueLag == nil {
			continue
		}
		lbls := render.ExternalMetricLabels(p.Name)
		if !sel.Matches(labels.Set(lbls)) {
			continue
		}
		out.Items = append(out.Items, emv1beta1.ExternalMetricValue{
			MetricName:   Metric,
			MetricLabels: lbls,
			Timestamp:    now,
			Value:        *resource.NewQuantity(*p.Status.DueLag, resource.DecimalSI),
		})
	}
	slices.SortFunc(out.Items, func(a, b emv1beta1.ExternalMetricValue) int {
		return strings.Compare(a.MetricLabels[render.ExternalMetricPipelineLabel], b.MetricLabels[render.ExternalMetricPipelineLabel])
	})
	return out, nil
}

// ConvertToTable implements rest.TableConvertor: the pipeline and the value.
func (s *Storage) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "ConsumerPipeline", Type: "string", Description: "The pipeline (its label " + render.ExternalMetricPipelineLabel + ")."},
		{Name: "Value", Type: "string", Description: "Its due lag: the records its consumers could process now."},
	}}
	row := func(v *emv1beta1.ExternalMetricValue) metav1.TableRow {
		return metav1.TableRow{Cells: []any{v.MetricLabels[render.ExternalMetricPipelineLabel], v.Value.String()}, Object: runtime.RawExtension{Object: v}}
	}
	switch o := obj.(type) {
	case *emv1beta1.ExternalMetricValue:
		t.Rows = []metav1.TableRow{row(o)}
	case *emv1beta1.ExternalMetricValueList:
		t.Rows = make([]metav1.TableRow, len(o.Items))
		for i := range o.Items {
			t.Rows[i] = row(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T as a table", obj)
	}
	return t, nil
}

// clock is s.Clock, the real clock by default.
func (s *Storage) clock() clock.PassiveClock {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}
