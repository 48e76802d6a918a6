package strimzi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSamplesPassTheShippedAdmissionPolicies runs the script's `kubectl apply` of the samples with
// a server-side dry run, on a control plane with the admission policies config/strimzi/manager
// installs (config/default's), as the script's administrator: the script stops at the first
// object the API server refuses (set -e), such as a DeadLetterAction whose requestedBy is not
// that administrator.
func TestSamplesPassTheShippedAdmissionPolicies(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scriptRuns(t, "kubectl apply --server-side -k "+samplesOverlay)
	env := sharedEnv(t)
	for _, o := range kustomize(t, env, managerOverlay) {
		if o.GetAPIVersion() != "admissionregistration.k8s.io/v1" {
			continue
		}
		o.SetNamespace("")
		err := env.Client.Create(ctx, o)
		if !apierrors.IsAlreadyExists(err) {
			g.Expect(err).NotTo(HaveOccurred(), "%s %s", o.GetKind(), o.GetName())
		}
	}
	err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: samplesNamespace}})
	if !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}

	// The API server loads a policy asynchronously: wait until it refuses an action requested in
	// someone else's name.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "retry.retryops.dev/v1alpha1", "kind": "DeadLetterAction",
		"metadata": map[string]any{"name": "probe", "namespace": samplesNamespace},
		"spec":     map[string]any{"queue": "q", "action": "Resolve", "note": "probe", "requestedBy": "someone-else@example.com", "selector": map[string]any{"reasons": []any{"x"}}},
	}}
	g.Eventually(func() error { return env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll) }, 30*time.Second, 100*time.Millisecond).
		Should(MatchError(ContainSubstring("spec.requestedBy must be the user creating the action")))

	out, err := env.Kubectl(nil, "apply", "--server-side", "--dry-run=server", "-k", repoPath(samplesOverlay))
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	g.Expect(strings.Count(out, "serverside-applied")).To(Equal(len(kustomize(t, env, samplesOverlay))), "%s", out)
}
