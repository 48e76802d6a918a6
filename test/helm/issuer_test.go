package helm

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCertificateNamesTheIssuerGiven: certManager.issuerRef reaches the Certificate whole, its group
// included (an external issuer such as AWS Private CA's awspca.cert-manager.io); a dropped group
// names an issuer of cert-manager.io that does not exist, and the certificate is never issued.
func TestCertificateNamesTheIssuerGiven(t *testing.T) {
	for _, tc := range []struct {
		name, issuer string
		want         map[string]any
	}{
		{"external issuer", "{name: pca, kind: AWSPCAClusterIssuer, group: awspca.cert-manager.io}", map[string]any{"name": "pca", "kind": "AWSPCAClusterIssuer", "group": "awspca.cert-manager.io"}},
		{"cert-manager's", "{name: ca, kind: ClusterIssuer}", map[string]any{"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := filepath.Join(t.TempDir(), "issuer.yaml")
			if err := os.WriteFile(values, []byte("certManager: {enabled: true, issuerRef: "+tc.issuer+"}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			eachHelm(t, func(t *testing.T, helm string) {
				_, objs := render(t, helm, values)
				ref, _, _ := unstructured.NestedMap(find(t, objs, "Certificate", release+"-deadletters-api").Object, "spec", "issuerRef")
				NewWithT(t).Expect(ref).To(Equal(tc.want))
			})
		})
	}
}
