package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// TestALabelForgedOnAConfigMapTheManagerReadsKeepsItsData: a tenant may label any ConfigMap of
// their namespace, the dispatcher config or the circuit reports the manager reads from the cache
// included, with retry.retryops.dev/alert-rules=true. The cache then still keeps their data: only
// a ConfigMap holding nothing but rule files (render.RuleFileKey) is kept as digests.
func TestALabelForgedOnAConfigMapTheManagerReadsKeepsItsData(t *testing.T) {
	labelled := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cm",
			Labels: map[string]string{render.LabelManagedBy: render.LabelManagedByValue, render.LabelAlertRules: "true"}},
			Data: data}
	}
	for name, data := range map[string]map[string]string{
		"the dispatcher config": {render.ConfigKey: `{"topics":{}}`},
		"the circuit reports":   {"orders-dispatcher-7d9f8-abcde": `{"state":"Open"}`},
		"a rule file and more":  {render.RuleFileKey("team", "p", "consumerpipeline"): "groups: []\n", render.ConfigKey: "{}"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			cm := labelled(data)
			want := cm.DeepCopy().Data
			_, err := controllers.StripUnread(cm)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cm.Data).To(Equal(want))
			g.Expect(cm.Annotations).NotTo(HaveKey(apply.CachedDataAnnotation))
		})
	}
	g := NewWithT(t)
	rules := labelled(map[string]string{render.RuleFileKey("team", "p", "consumerpipeline"): "groups: []\n"})
	_, err := controllers.StripUnread(rules)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rules.Data).To(BeNil())
	g.Expect(rules.Annotations).To(HaveKey(apply.CachedDataAnnotation))
}
