package devenv_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/devenv"
)

// waitsForItsSecret: as a kubelet, the runner does not start a Pod whose Secret volume cannot be
// mounted (the Secret is missing, or lacks a key an item names): the Pod stays Pending, its container
// waiting in ContainerCreating with the reason; once the Secret holds the key, the Pod starts without
// being touched, with the key at the item's path.
func waitsForItsSecret(ctx context.Context, t *testing.T, c client.Client, r *devenv.Runner, labels map[string]string) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(c.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "late-config", Namespace: "default"},
		Data: map[string]string{
			"config.json": `{"listen":{"healthAddress":":8081"},"secretFile":"/var/run/secrets/retryops/kafka/sasl/password"}`,
			"unused":      "not projected",
		},
	})).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "default", Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "dispatcher", Image: "ghcr.io/retryops/retry-dispatcher:dev",
				Env: []corev1.EnvVar{{Name: "RETRYOPS_CONFIG", Value: "/etc/retryops/config.json"}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/retryops"},
					{Name: "sasl", MountPath: "/var/run/secrets/retryops/kafka/sasl"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "late-config"},
					Items:                []corev1.KeyToPath{{Key: "config.json", Path: "config.json"}},
				}}},
				{Name: "sasl", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "late-creds",
					Items:      []corev1.KeyToPath{{Key: "user.password", Path: "password"}},
				}}},
			},
		},
	}
	g.Expect(c.Create(ctx, pod)).To(Succeed())
	key := "default/late"
	waiting := func(message string) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodPending))
			g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
			w := pod.Status.ContainerStatuses[0].State.Waiting
			g.Expect(w).NotTo(BeNil())
			g.Expect(w.Reason).To(Equal("ContainerCreating"))
			g.Expect(w.Message).To(ContainSubstring(message))
		}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
		g.Expect(r.Running()).NotTo(ContainElement(key))
		g.Expect(isPodReady(pod)).To(BeFalse())
	}
	waiting(`secret "late-creds"`)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "late-creds", Namespace: "default"},
		Data:       map[string][]byte{"password": []byte("wrong key")},
	}
	g.Expect(c.Create(ctx, secret)).To(Succeed())
	waiting(`secret "late-creds" has no key "user.password"`)

	secret.Data = map[string][]byte{"user.password": []byte("s3cret-late")}
	g.Expect(c.Update(ctx, secret)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(isPodReady(pod)).To(BeTrue())
	}, 30*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Expect(r.Running()).To(ContainElement(key))
	// The item's key is at the item's path.
	g.Expect(httpGet(r.HealthAddress(key) + "/secret")).To(Equal("s3cret-late"))
	g.Expect(c.Delete(ctx, pod)).To(Succeed())
}
