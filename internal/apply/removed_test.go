package apply

import (
	"context"
	"encoding/hex"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestAKeyNoLongerRenderedIsRemoved: a label, an annotation or a data key the operator set and no
// longer renders (a pod annotation removed from a pipeline's template, a label dropped from
// --alert-rule-labels, an operator upgrade) leaves the child. The live object holding every key
// rendered is not enough to skip the apply: it holds one more of ours. A key someone else added
// stays, and an unchanged rendering still writes nothing.
func TestAKeyNoLongerRenderedIsRemoved(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "owner-uid"}}
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	sent := new([]string)
	c := uncached{writes: writes{Client: api, sent: sent}, api: api}
	child := func(labels, annotations, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", Labels: labels, Annotations: annotations}, Data: data}
	}
	cached := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "child"}, cm)).To(Succeed())
		return cm
	}
	both := child(map[string]string{"keep": "1", "drop": "1"}, map[string]string{"keep": "1", "drop": "1"}, map[string]string{"keep": "1", "drop": "1"})
	_, applied, err := Owned(ctx, c, memo, owner, both, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())

	// Someone else adds a label of their own.
	cm := cached()
	cm.Labels["theirs"] = "1"
	g.Expect(api.Update(ctx, cm)).To(Succeed())

	_, applied, err = Owned(ctx, c, memo, owner, child(map[string]string{"keep": "1", "drop": "1"}, map[string]string{"keep": "1", "drop": "1"}, map[string]string{"keep": "1", "drop": "1"}), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse(), "the same rendering writes nothing, whatever others added")

	one := child(map[string]string{"keep": "1"}, map[string]string{"keep": "1"}, map[string]string{"keep": "1"})
	_, applied, err = Owned(ctx, c, memo, owner, one, cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "a key no longer rendered is a change")
	got := cached()
	g.Expect(got.Labels).NotTo(HaveKey("drop"))
	g.Expect(got.Labels).To(HaveKeyWithValue("theirs", "1"), "another's label stays")
	g.Expect(got.Annotations).NotTo(HaveKey("drop"))
	g.Expect(got.Data).To(Equal(map[string]string{"keep": "1"}))

	_, applied, err = Owned(ctx, c, memo, owner, child(map[string]string{"keep": "1"}, map[string]string{"keep": "1"}, map[string]string{"keep": "1"}), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse(), "then nothing more")
}

// appliedAs gives cm, owner's child, the AppliedAnnotation Owned would give it: cm as applied.
func appliedAs(t *testing.T, owner client.Object, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	rendered := cm.DeepCopy()
	rendered.UID, rendered.ResourceVersion = "", "" // the server's, never rendered
	u, err := Object(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if err := controllerutil.SetControllerReference(owner, u, clientgoscheme.Scheme); err != nil {
		t.Fatal(err)
	}
	sum, ok := sumOf(u)
	if !ok {
		t.Fatal("no digest")
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[AppliedAnnotation] = hex.EncodeToString(sum[:])
	return cm
}
