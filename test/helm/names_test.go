package helm

import (
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartNamesFollowTheRelease renders the chart as release ops in namespace platform, with
// cert-manager and the external metrics API: every object but the CRDs and the APIServices (whose
// names are their group's) is named after the release and lives in its namespace or is
// cluster-scoped; the manager is told the names it would otherwise take from config/default (its
// Service and Secret), and everything that names another object of the release names one that is
// rendered.
func TestChartNamesFollowTheRelease(t *testing.T) {
	const rel, ns, prefix = "ops", "platform", "ops-retry-operator-"
	// The binding of the built-in Role extension-apiserver-authentication-reader, in kube-system.
	const authReader = prefix + "extension-apiserver-authentication-reader"
	eachHelm(t, func(t *testing.T, helm string) {
		g := NewWithT(t)
		_, objs := renderAs(t, helm, rel, ns, filepath.Join("testdata", "values", "cert-manager.yaml"))
		names := map[string]bool{}
		for _, u := range objs {
			names[u.GetKind()+"/"+u.GetName()] = true
			switch u.GetKind() {
			case "CustomResourceDefinition", "APIService":
				continue
			}
			g.Expect(u.GetName()).To(HavePrefix(prefix), key(u))
			if u.GetName() == authReader {
				// Bound where the Role it binds lives, which Kubernetes makes.
				g.Expect(u.GetNamespace()).To(Equal("kube-system"), key(u))
				continue
			}
			g.Expect(u.GetNamespace()).To(BeElementOf(ns, ""), key(u))
		}
		dep := find(t, objs, "Deployment", prefix+"controller-manager")
		containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		g.Expect(args).To(ContainElements("--deadletters-api-service="+prefix+"deadletters-api", "--deadletters-api-secret="+prefix+"deadletters-api-tls"))
		g.Expect(names).To(HaveKey("Service/" + prefix + "deadletters-api"))

		for _, u := range objs {
			if svc, found, _ := unstructured.NestedString(u.Object, "spec", "service", "name"); found {
				g.Expect(names).To(HaveKey("Service/"+svc), key(u))
			}
			if ref, found, _ := unstructured.NestedStringMap(u.Object, "roleRef"); found && u.GetName() != authReader {
				g.Expect(names).To(HaveKey(ref["kind"]+"/"+ref["name"]), key(u))
			}
			subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
			for _, s := range subjects {
				g.Expect(s).To(HaveKeyWithValue("namespace", ns), key(u))
				g.Expect(names).To(HaveKey("ServiceAccount/"+s.(map[string]any)["name"].(string)), key(u))
			}
			if policy, found, _ := unstructured.NestedString(u.Object, "spec", "policyName"); found {
				g.Expect(names).To(HaveKey("ValidatingAdmissionPolicy/"+policy), key(u))
			}
			if from := u.GetAnnotations()["cert-manager.io/inject-ca-from"]; from != "" {
				g.Expect(from).To(HavePrefix(ns+"/"), key(u))
				g.Expect(names).To(HaveKey("Certificate/"+strings.TrimPrefix(from, ns+"/")), key(u))
			}
		}
		cert := find(t, objs, "Certificate", prefix+"deadletters-api")
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		g.Expect(dns).To(ContainElement(prefix + "deadletters-api." + ns + ".svc"))
	})
}
