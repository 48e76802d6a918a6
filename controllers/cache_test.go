package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

// TestTheCacheKeepsNoAlertRuleData: the manager's cache (CacheOptions) holds an alert-rule
// ConfigMap without its data, the rule file, and with the digest apply.Owned compares instead
// (at 10,000 resources the rule files were the largest part of the cache). The
// ConfigMaps whose data the manager reads (the dispatcher config, circuit reports, ledgers) keep
// it, and a digest annotation written on the API server is not kept.
func TestTheCacheKeepsNoAlertRuleData(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, _, dlq := childPipeline(t)
	alerts := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeadLetterQueueAlertsName(dlq)}}
	g.Eventually(getter(alerts), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))
	g.Expect(alerts.Data).NotTo(BeEmpty())
	config := configMapOf(p)
	g.Eventually(getter(config), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: "forged",
		Labels:      map[string]string{render.LabelManagedBy: render.LabelManagedByValue},
		Annotations: map[string]string{apply.CachedDataAnnotation: "{}"}}}
	g.Expect(env.Client.Create(ctx, forged)).To(Succeed())

	opts := controllers.CacheOptions([]string{p.Namespace})
	opts.Scheme = envtestutil.Scheme()
	c, err := cache.New(env.Config, opts)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.GetInformer(ctx, &corev1.ConfigMap{})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())

	cached := &corev1.ConfigMap{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKeyFromObject(alerts), cached) }, wait, poll).Should(Succeed())
	g.Expect(cached.Data).To(BeNil())
	g.Expect(cached.Annotations).To(HaveKey(apply.CachedDataAnnotation))
	g.Expect(cached.Labels).To(Equal(alerts.Labels))

	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(config), cached)).To(Succeed())
	g.Expect(cached.Data).To(Equal(config.Data))
	g.Expect(cached.Annotations).NotTo(HaveKey(apply.CachedDataAnnotation))

	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(forged), cached)).To(Succeed())
	g.Expect(cached.Annotations).NotTo(HaveKey(apply.CachedDataAnnotation))
}

// TestAlertRuleDataEditedOutOfBandIsReverted: the manager's cache keeps the alert-rule ConfigMaps'
// data as a digest only, and an edit of the rule file is still reverted, whichever resource owns
// it; a key someone adds beside the rule file is left alone, as on any child.
func TestAlertRuleDataEditedOutOfBandIsReverted(t *testing.T) {
	g := NewWithT(t)
	p, _, dlq := childPipeline(t)
	for _, tc := range []struct {
		owner client.Object
		kind  string
		cm    *corev1.ConfigMap
	}{
		{p, "ConsumerPipeline", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.PipelineAlertsName(p)}}},
		{dlq, "DeadLetterQueue", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeadLetterQueueAlertsName(dlq)}}},
	} {
		cm := tc.cm
		g.Eventually(getter(cm), wait, poll).Should(ownedBy(tc.owner, tc.kind))
		rendered := cm.DeepCopy().Data
		g.Expect(rendered).To(HaveLen(1))
		update(t, cm, func(cm *corev1.ConfigMap) {
			for k := range cm.Data {
				cm.Data[k] = "groups: []\n"
			}
			cm.Data["theirs.yaml"] = "kept"
		})
		want := map[string]string{"theirs.yaml": "kept"}
		for k, v := range rendered {
			want[k] = v
		}
		g.Eventually(func() (map[string]string, error) { _, err := getter(cm)(); return cm.Data, err }, wait, poll).Should(Equal(want), "reverted, the %s's", tc.kind)
	}
}

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
