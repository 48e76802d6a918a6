package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestApplyObjectDropsStatusAndNulls(t *testing.T) {
	g := NewWithT(t)
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}}},
	}
	u, err := Object(d)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u.Object).NotTo(HaveKey("status"))
	g.Expect(u.Object["metadata"]).NotTo(HaveKey("creationTimestamp"))
	g.Expect(u.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"]).NotTo(HaveKey("creationTimestamp"))
	g.Expect(u.GetAPIVersion()).To(Equal("apps/v1"))
	// An empty object that means something (an emptyDir volume) stays.
	vol := u.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["volumes"].([]any)[0]
	g.Expect(vol).To(HaveKeyWithValue("emptyDir", map[string]any{}))
}

func TestContains(t *testing.T) {
	want := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"a": "1"}},
		"spec": map[string]any{
			"replicas": int64(2),
			"strategy": map[string]any{},
			"containers": []any{
				map[string]any{"name": "c", "image": "i:1", "env": []any{map[string]any{"name": "X", "value": "1"}}},
			},
		},
	}
	have := func(mutate func(spec map[string]any, meta map[string]any)) map[string]any {
		h := map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"a": "1", "added-by-someone": "x"}, "resourceVersion": "7"},
			"spec": map[string]any{
				"replicas": int64(2),
				"strategy": map[string]any{"type": "RollingUpdate"},
				"containers": []any{
					map[string]any{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent", "env": []any{map[string]any{"name": "X", "value": "1"}}},
				},
			},
			"status": map[string]any{"replicas": int64(0)},
		}
		if mutate != nil {
			mutate(h["spec"].(map[string]any), h["metadata"].(map[string]any))
		}
		return h
	}
	container := func(spec map[string]any) map[string]any { return spec["containers"].([]any)[0].(map[string]any) }
	for name, tc := range map[string]struct {
		have map[string]any
		want bool
	}{
		"defaults and other labels added by the server or others": {have(nil), true},
		"replicas changed":            {have(func(s, _ map[string]any) { s["replicas"] = int64(5) }), false},
		"a number of another Go type": {have(func(s, _ map[string]any) { s["replicas"] = float64(2) }), true},
		"image changed":               {have(func(s, _ map[string]any) { container(s)["image"] = "i:2" }), false},
		"env value changed": {have(func(s, _ map[string]any) {
			container(s)["env"] = []any{map[string]any{"name": "X", "value": "2"}}
		}), false},
		"an env var added": {have(func(s, _ map[string]any) {
			container(s)["env"] = []any{map[string]any{"name": "X", "value": "1"}, map[string]any{"name": "Y", "value": "2"}}
		}), false},
		"our label removed": {have(func(_, m map[string]any) { delete(m["labels"].(map[string]any), "a") }), false},
		"an empty object we set and the server left out": {have(func(s, _ map[string]any) { delete(s, "strategy") }), true},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(contains(tc.have, want)).To(Equal(tc.want))
		})
	}
}

// TestAppliedObjectsCompareEqualToTheirTypedForm checks the round trip the controllers rely on: the
// form applied, compared with the typed object the cache returns (with quantities and int-or-strings),
// finds nothing to do.
func TestAppliedObjectsCompareEqualToTheirTypedForm(t *testing.T) {
	g := NewWithT(t)
	c := corev1.Container{Name: "c", Image: "i", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}},
	}
	u, err := Object(d)
	g.Expect(err).NotTo(HaveOccurred())
	cached := d.DeepCopy()
	cached.TypeMeta = metav1.TypeMeta{} // as the cache may return it
	cached.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	have, err := toUnstructuredMap(cached)
	g.Expect(err).NotTo(HaveOccurred())
	want := u.Object
	delete(want, "apiVersion")
	delete(want, "kind")
	g.Expect(contains(have, want)).To(BeTrue())
}

// memo is the cache of applies the tests share, as the reconcilers share theirs.
var memo = NewCache(nil, 0)
