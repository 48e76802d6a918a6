package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestExternalMetricsComponent checks the opt-in config/external-metrics: its one APIService, the
// one the manager's --external-metrics-apiservice names, points at the Service config/default
// makes for the manager's aggregated API (the only one whose caBundle the manager writes); the
// manager may read and patch it; config/default does not register the group (KEDA or
// prometheus-adapter may); and the API server accepts it (a server-side dry run).
func TestExternalMetricsComponent(t *testing.T) {
	g := NewWithT(t)
	_, def := kustomize(t, filepath.Join(envtestutil.RepoRoot(), "config", "default"))
	dep := &appsv1.Deployment{}
	only(t, def, "Deployment", dep)
	o := managerFlags(t, dep)
	g.Expect(o.deadLettersAPI.extAPIService).To(Equal(dlqapi.ExternalMetricsAPIServiceName))
	for _, u := range def {
		g.Expect(u.GetKind() == "APIService" && u.GetName() == dlqapi.ExternalMetricsAPIServiceName).To(BeFalse(), "config/default registers external.metrics.k8s.io")
	}
	svc := &corev1.Service{}
	named(t, def, "Service", o.deadLettersAPI.service, svc)

	rendered, objs := kustomize(t, filepath.Join(envtestutil.RepoRoot(), "config", "external-metrics"))
	g.Expect(objs).To(HaveLen(1))
	as := &unstructured.Unstructured{}
	named(t, objs, "APIService", o.deadLettersAPI.extAPIService, as)
	spec, _, _ := unstructured.NestedMap(as.Object, "spec")
	g.Expect(spec).To(HaveKeyWithValue("group", "external.metrics.k8s.io"))
	g.Expect(spec).To(HaveKeyWithValue("version", "v1beta1"))
	g.Expect(spec["service"]).To(Equal(map[string]any{"name": svc.Name, "namespace": svc.Namespace, "port": float64(svc.Spec.Ports[0].Port)}))
	g.Expect(spec).NotTo(HaveKey("insecureSkipTLSVerify"))

	granted := false
	for _, u := range def {
		if u.GetKind() != "ClusterRole" {
			continue
		}
		role := &rbacv1.ClusterRole{}
		named(t, def, "ClusterRole", u.GetName(), role)
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, "apiregistration.k8s.io") && slices.Contains(r.ResourceNames, dlqapi.ExternalMetricsAPIServiceName) {
				g.Expect(r.Verbs).To(ConsistOf("get", "patch"))
				granted = true
			}
		}
	}
	g.Expect(granted).To(BeTrue(), "no ClusterRole of config/default lets the manager read and patch %s", dlqapi.ExternalMetricsAPIServiceName)

	out, err := startEnv(t).Kubectl(rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Count(out, "(server dry run)")).To(Equal(1), out)
}
