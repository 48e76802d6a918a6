package devenv_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

func TestRunnerRunsDeploymentPodsAsLocalProcesses(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	bin := filepath.Join(t.TempDir(), "fakedispatcher")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/fakedispatcher").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	env, err := envtestutil.Start()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()
	cm, err := env.StartControllerManager()
	g.Expect(err).NotTo(HaveOccurred())
	defer cm.Stop()

	// crasher exits with code 3 at once, as a dispatcher in a crash loop would.
	crasher := filepath.Join(t.TempDir(), "crasher")
	g.Expect(os.WriteFile(crasher, []byte("#!/bin/sh\nexit 3\n"), 0o755)).To(Succeed())
	r := &devenv.Runner{
		Client: env.Client, Dir: t.TempDir(), Log: zap.New(zap.UseDevMode(true)),
		Images:         map[string]string{"ghcr.io/retryops/retry-dispatcher": bin, "example.com/crasher": crasher},
		RestartBackoff: 200 * time.Millisecond, Interval: 50 * time.Millisecond,
	}
	runnerDone := make(chan struct{})
	go func() { defer close(runnerDone); _ = r.Start(ctx) }()

	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"},
		Data:       map[string][]byte{"password": []byte("s3cret")},
	})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-config", Namespace: "default"},
		Data:       map[string]string{"config.json": `{"listen":{"healthAddress":":8081"},"secretFile":"/etc/creds/password"}`},
	})).To(Succeed())
	labels := map[string]string{"app.kubernetes.io/managed-by": "retry-operator", "app.kubernetes.io/instance": "demo"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "dispatcher", Image: "ghcr.io/retryops/retry-dispatcher:dev",
						Env: []corev1.EnvVar{{Name: "RETRYOPS_CONFIG", Value: "/etc/retryops/config.json"}, {Name: "GREETING", Value: "hello"}},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/etc/retryops"}, {Name: "creds", MountPath: "/etc/creds"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "demo-config"}}}},
						{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
					},
				},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, dep)).To(Succeed())

	readyReplicas := func() (int32, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep)
		return dep.Status.ReadyReplicas, err
	}
	g.Eventually(readyReplicas, 60*time.Second, 200*time.Millisecond).Should(Equal(int32(2)), "see %s", cm.LogPath)
	g.Expect(r.Running()).To(HaveLen(2))

	// The process sees the Secret through the remapped path and the container's env.
	pods := &corev1.PodList{}
	g.Expect(env.Client.List(ctx, pods, client.MatchingLabels(labels))).To(Succeed())
	g.Expect(pods.Items).To(HaveLen(2))
	for _, p := range pods.Items {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
	}
	for _, p := range pods.Items {
		base := r.HealthAddress(p.Namespace + "/" + p.Name)
		g.Expect(base).NotTo(BeEmpty())
		g.Expect(httpGet(base + "/secret")).To(Equal("s3cret"))
		g.Expect(httpGet(base + "/env")).To(Equal("hello"))
	}

	// Scaling down stops a process; deleting the Deployment stops them all (garbage collection).
	dep.Spec.Replicas = ptr.To[int32](1)
	g.Expect(env.Client.Update(ctx, dep)).To(Succeed())
	g.Eventually(r.Running, 60*time.Second, 200*time.Millisecond).Should(HaveLen(1))
	g.Expect(env.Client.Delete(ctx, dep, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(r.Running, 60*time.Second, 200*time.Millisecond).Should(BeEmpty())

	// A process that exits is started again with back-off, as a kubelet restarts a container: the
	// Pod stays Running, not Ready, and shows the restarts and the last exit, so a crash loop is
	// visible with kubectl get pods.
	crash := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crasher", Namespace: "default", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "dispatcher", Image: "example.com/crasher:1"}}},
	}
	g.Expect(env.Client.Create(ctx, crash)).To(Succeed())
	var sawWaiting bool
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(crash), crash)).To(Succeed())
		g.Expect(crash.Status.ContainerStatuses).To(HaveLen(1))
		st := crash.Status.ContainerStatuses[0]
		if st.State.Waiting != nil && st.State.Waiting.Reason == "CrashLoopBackOff" {
			sawWaiting = true
		}
		g.Expect(crash.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(st.RestartCount).To(BeNumerically(">=", 2))
		g.Expect(st.LastTerminationState.Terminated).NotTo(BeNil())
		g.Expect(st.LastTerminationState.Terminated.ExitCode).To(Equal(int32(3)))
		g.Expect(st.LastTerminationState.Terminated.Reason).To(Equal("Error"))
	}, 60*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Expect(sawWaiting).To(BeTrue(), "the container waited in CrashLoopBackOff between restarts")
	g.Expect(isPodReady(crash)).To(BeFalse())
	g.Expect(env.Client.Delete(ctx, crash)).To(Succeed())

	waitsForItsSecret(ctx, t, env.Client, r, labels)

	cancel()
	<-runnerDone
}

func isPodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
