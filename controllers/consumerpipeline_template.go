package controllers

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/lease"
	"github.com/retryops/retry-operator/internal/render"
)

// templateChecks remembers, per pipeline UID, the generation whose stored spec.template decoded
// strictly, so that the uncached read happens once per generation. An entry is leased for a few
// refresh intervals: that of a pipeline deleted goes by itself.
type templateChecks struct{ ok lease.Map[types.UID, int64] }

// checkTemplate decodes the pipeline's spec.template as the API server stores it, strictly: the
// typed client drops fields that are not part of a PodSpec (a typo such as "restartPolicyy"), so the
// pipeline is read unstructured, uncached. An unknown or duplicate field is a *render.SpecError
// naming its path. Without an API reader (tests that build the reconciler bare) nothing is checked.
func (r *ConsumerPipelineReconciler) checkTemplate(ctx context.Context, p *retryv1alpha1.ConsumerPipeline) error {
	if p.Spec.Template == nil || r.APIReader == nil {
		return nil
	}
	now, d := r.Clock.Now(), lease.For(r.RefreshInterval)
	if g, ok := r.templates.ok.Get(p.UID, now, d); ok && g == p.Generation {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(retryv1alpha1.GroupVersion.WithKind("ConsumerPipeline"))
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p), u); err != nil {
		return err
	}
	raw, found, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "template")
	if err != nil || !found {
		return err
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	if _, err := render.DecodeTemplate(b); err != nil {
		return err
	}
	r.templates.ok.Put(p.UID, u.GetGeneration(), now, d)
	return nil
}
