// Package keda_test checks the ScaledObjects the operator makes when KEDA is installed against the
// CRDs of the KEDA release hack/update-keda-crds.sh pins (kept in testdata/<version>): a server-side
// dry run in envtest, so the API server applies the release's schema and CEL rules as it would on a
// cluster with KEDA; the checks of KEDA's admission webhook that need no KEDA (names, bounds,
// triggers, an HPA already scaling the target); that the target resolves to the pipeline's scale
// subresource as KEDA resolves it; and docs/autoscaling.md's example against the render code.
package keda_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

const script = "hack/update-keda-crds.sh"

// namespaces are where the tests put pipelines and ScaledObjects.
var namespaces = []string{"shop", "team-a-payments"}

func TestMain(m *testing.M) { shared.Main(m) }

// shared is the package's one control plane, with the pinned release's CRDs and the namespaces.
var shared = envtestutil.Shared{
	CRDDirs: func(t testing.TB) []string { return []string{crdDir(t)} },
	Setup:   envtestutil.CreateNamespaces(namespaces...),
}

func sharedEnv(t *testing.T) *envtestutil.Env { return shared.Env(t) }

// pinnedVersion returns the KEDA release the script pins.
func pinnedVersion(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(script))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KEDA_VERSION=(\d+\.\d+\.\d+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s pins no KEDA release (a line KEDA_VERSION=x.y.z)", script)
	}
	return string(m[1])
}

// crdDir is the directory of the pinned release's CRDs.
func crdDir(t testing.TB) string {
	t.Helper()
	version := pinnedVersion(t)
	dir := repoPath("test", "keda", "testdata", version)
	for _, f := range []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s pins KEDA %s but %s is not in %s (run the script): %v", script, version, f, dir, err)
		}
	}
	return dir
}

func repoPath(elem ...string) string { return envtestutil.RepoPath(elem...) }

// decode decodes YAML documents.
func decode(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := envtestutil.DecodeObjects(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return objs
}

// dryRun creates obj with a server-side dry run and fails unless it is accepted and not stored.
func dryRun(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	if err := c.Create(ctx, obj.DeepCopy(), client.DryRunAll); err != nil {
		return err
	}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopy()); {
	case err == nil:
		return fmt.Errorf("%s %s was stored", obj.GetKind(), obj.GetName())
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// maxLabelValue is the longest label value; KEDA labels the HPA with the ScaledObject's name.
const maxLabelValue = 63

// kedaWebhookRefuses returns why KEDA's admission webhook would refuse to create so, as far as it
// can be told without KEDA: the checks of apis/keda/v1alpha1/scaledobject_webhook.go at the pinned
// release that are not about CPU or memory triggers or scaling modifiers (which the operator never
// writes). verifyHpas looks at the HPAs in so's namespace, as KEDA does.
func kedaWebhookRefuses(ctx context.Context, c client.Client, so *unstructured.Unstructured) error {
	// verifyName.
	hpaName, _, _ := unstructured.NestedString(so.Object, "spec", "advanced", "horizontalPodAutoscalerConfig", "name")
	if hpaName == "" {
		hpaName = "keda-hpa-" + so.GetName()
	}
	for what, n := range map[string]string{"scaledobject": so.GetName(), "HPA": hpaName} {
		if len(n) > maxLabelValue {
			return fmt.Errorf("%s name %q is %d characters long; must be no more than %d", what, n, len(n), maxLabelValue)
		}
	}
	// verifyReplicaCount: KEDA's defaults are 0 and 100.
	minCount, hasMin, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
	maxCount, hasMax, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount")
	if !hasMax {
		maxCount = 100
	}
	if hasMin && minCount > maxCount {
		return fmt.Errorf("MinReplicaCount=%d must be less than MaxReplicaCount=%d", minCount, maxCount)
	}
	if idle, ok, _ := unstructured.NestedInt64(so.Object, "spec", "idleReplicaCount"); ok && idle >= minCount {
		return fmt.Errorf("IdleReplicaCount=%d must be less than MinReplicaCount=%d", idle, minCount)
	}
	// verifyTriggers.
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if len(triggers) == 0 {
		return errors.New("no triggers defined in the ScaledObject")
	}
	names := map[string]bool{}
	for _, tr := range triggers {
		name, _, _ := unstructured.NestedString(tr.(map[string]any), "name")
		if name != "" && names[name] {
			return fmt.Errorf("triggerName %q is defined multiple times", name)
		}
		names[name] = true
	}
	// verifyHpas: an HPA that scales the same target and that this ScaledObject does not own.
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")
	hpas := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := c.List(ctx, hpas, client.InNamespace(so.GetNamespace())); err != nil {
		return err
	}
	for _, h := range hpas.Items {
		r := h.Spec.ScaleTargetRef
		if r.APIVersion != ref["apiVersion"] || r.Kind != ref["kind"] || r.Name != ref["name"] {
			continue
		}
		owned := false
		for _, o := range h.OwnerReferences {
			owned = owned || o.Kind == so.GetKind() && o.Name == so.GetName()
		}
		if !owned {
			return fmt.Errorf("the workload '%s' of type '%s' is already managed by the hpa '%s'", r.Name, r.Kind, h.Name)
		}
	}
	return nil
}
