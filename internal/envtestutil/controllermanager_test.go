package envtestutil_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestControllerManagerCollectsGarbageAndRollsOutDeployments proves the harness that `make dev` and
// the end-to-end test rely on: owner-reference garbage collection and Deployment → ReplicaSet → Pods.
func TestControllerManagerCollectsGarbageAndRollsOutDeployments(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := envtestutil.Start()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()
	cm, err := env.StartControllerManager()
	g.Expect(err).NotTo(HaveOccurred())
	defer cm.Stop()

	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner", Namespace: "default"}}
	g.Expect(env.Client.Create(ctx, owner)).To(Succeed())
	child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
	}}}}
	g.Expect(env.Client.Create(ctx, child)).To(Succeed())

	labels := map[string]string{"app": "demo"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/demo:1"}}},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, dep)).To(Succeed())
	g.Eventually(func() (int, error) {
		pods := &corev1.PodList{}
		err := env.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels(labels))
		return len(pods.Items), err
	}, 60*time.Second, 200*time.Millisecond).Should(Equal(2), "see %s", cm.LogPath)

	g.Expect(env.Client.Delete(ctx, owner)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(child), &corev1.ConfigMap{}))
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue(), "the garbage collector did not delete the child; see %s", cm.LogPath)
}
