package extmetrics_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// waitAvailable waits for the Available condition of the APIService name.
func waitAvailable(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	var last string
	NewWithT(t).Eventually(ctx, func() bool {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apiregistration.k8s.io/v1")
		u.SetKind("APIService")
		if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
			last = err.Error()
			return false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprint(m["reason"], ": ", m["message"])
				return m["status"] == "True"
			}
		}
		return false
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), func() string { return "APIService " + name + " Available: " + last })
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
