package ruleapi

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// countingMapper is a RESTMapper that serves PrometheusRule when served is set, and counts lookups.
type countingMapper struct {
	meta.RESTMapper
	served  bool
	lookups int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.lookups++
	if !m.served {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return &meta.RESTMapping{GroupVersionKind: render.PrometheusRuleGVK}, nil
}

func TestRuleAPIDetection(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m := &countingMapper{}
	a := &API{mapper: m}
	crd := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: prometheusRuleCRD}}

	// Looked up once, then remembered: no CRD, no discovery request per reconcile.
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(m.lookups).To(Equal(1))

	// The CRD appears but is not served yet: every Served looks again until it is.
	a.crdChanged(ctx, crd, false)
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(m.lookups).To(Equal(3))
	m.served = true
	g.Expect(a.Served()).To(BeTrue())
	g.Expect(a.Served()).To(BeTrue())
	g.Expect(m.lookups).To(Equal(4))

	// The CRD being deleted: not served, whatever the mapper still remembers.
	deleting := crd.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	a.crdChanged(ctx, deleting, false)
	g.Expect(a.Served()).To(BeFalse())
	a.crdChanged(ctx, crd, false)
	g.Expect(a.Served()).To(BeTrue())
	a.crdChanged(ctx, crd, true)
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(m.lookups).To(Equal(5))

	// An apply that found the kind gone (its CRD deleted, the mapper still remembering the kind, as
	// controller-runtime's does): not served, without asking the mapper, until an event about the
	// CRD says otherwise. Asking the mapper again answered "served" for ever: a CI run saw every
	// pipeline's and queue's reconcile fail for ten minutes on "the server could not find the
	// requested resource (post prometheusrules.monitoring.coreos.com)".
	a.crdChanged(ctx, crd, false)
	g.Expect(a.Served()).To(BeTrue())
	a.forget()
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(a.Served()).To(BeFalse())
	g.Expect(m.lookups).To(Equal(6))
	a.crdChanged(ctx, crd, false)
	g.Expect(a.Served()).To(BeTrue())
	g.Expect(m.lookups).To(Equal(7))
}

func TestLogKeyIsTheOwnersKind(t *testing.T) {
	g := NewWithT(t)
	g.Expect(logKey(&retryv1alpha1.DeadLetterQueue{})).To(Equal("deadLetterQueue"))
	g.Expect(logKey(&retryv1alpha1.ConsumerPipeline{})).To(Equal("consumerPipeline"))
}
