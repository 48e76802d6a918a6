package render_test

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
)

func TestSinkModeHasTheRestrictedPodSecurityDefaults(t *testing.T) {
	for _, in := range []*render.Inputs{sinkURIInputs(t), sinkRefSecretsInputs(t)} {
		dep := mustDeployment(t, in)
		pod := dep.Spec.Template.Spec
		ps := pod.SecurityContext
		if ps == nil || !ptr.Deref(ps.RunAsNonRoot, false) || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod security context %+v lacks runAsNonRoot or RuntimeDefault seccomp", ps)
		}
		if len(pod.Containers) != 1 || pod.Containers[0].Name != render.DispatcherContainer || pod.Containers[0].Image != testImage {
			t.Fatalf("containers %+v, want one dispatcher running %s", pod.Containers, testImage)
		}
		c := pod.Containers[0]
		s := c.SecurityContext
		switch {
		case s == nil:
			t.Fatal("no container security context")
		case !ptr.Deref(s.RunAsNonRoot, false):
			t.Error("runAsNonRoot is not true")
		case ptr.Deref(s.AllowPrivilegeEscalation, true):
			t.Error("allowPrivilegeEscalation is not false")
		case !ptr.Deref(s.ReadOnlyRootFilesystem, false):
			t.Error("readOnlyRootFilesystem is not true")
		case s.Capabilities == nil || !reflect.DeepEqual(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(s.Capabilities.Add) > 0:
			t.Errorf("capabilities %+v, want drop ALL only", s.Capabilities)
		case ptr.Deref(s.Privileged, false):
			t.Error("privileged")
		}
		// A token for the report (circuit breaker, Kafka refusing the consumer), to which the
		// ServiceAccount is limited: every pipeline's consumers report.
		const reports = true
		if got := ptr.Deref(pod.AutomountServiceAccountToken, false); got != reports {
			t.Errorf("automountServiceAccountToken %v, want %v", got, reports)
		}
		if pod.ServiceAccountName != render.ServiceAccountName(in.Pipeline) {
			t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, render.ServiceAccountName(in.Pipeline))
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources %+v lack requests or the memory limit", c.Resources)
		}
		wantEnv := 2 // the config and GOMEMLIMIT (TestGoMemLimitFollowsTheMemoryLimit)
		if reports {
			wantEnv = 3
		}
		if env := c.Env; len(env) != wantEnv || env[0].Name != config.EnvConfig || env[0].Value != render.ConfigFile ||
			(reports && (env[1].Name != config.EnvPodName || env[1].ValueFrom == nil || env[1].ValueFrom.FieldRef.FieldPath != "metadata.name")) ||
			env[wantEnv-1].Name != render.EnvGoMemLimit {
			t.Errorf("env %+v, want %s=%s then %s from metadata.name, then %s", env, config.EnvConfig, render.ConfigFile, config.EnvPodName, render.EnvGoMemLimit)
		}
		if got := ptr.Deref(pod.TerminationGracePeriodSeconds, 0); time.Duration(got)*time.Second <= config.DefaultDrainTimeout {
			t.Errorf("terminationGracePeriodSeconds %d is not above the drain timeout %s", got, config.DefaultDrainTimeout)
		}
		if got, want := ptr.Deref(dep.Spec.Replicas, -1), ptr.Deref(in.Pipeline.Spec.Replicas, 1); got != want {
			t.Errorf("replicas %d, want %d", got, want)
		}
	}
}

// TestProbesAndPortsMatchTheDispatcher keeps the probe paths and ports equal to the endpoints the
// dispatcher serves by default.
func TestProbesAndPortsMatchTheDispatcher(t *testing.T) {
	if render.PathHealthz != dispatcher.PathHealthz || render.PathReadyz != dispatcher.PathReadyz || render.PathMetrics != dispatcher.PathMetrics {
		t.Fatalf("render's paths %s %s %s differ from the dispatcher's %s %s %s", render.PathHealthz, render.PathReadyz, render.PathMetrics,
			dispatcher.PathHealthz, dispatcher.PathReadyz, dispatcher.PathMetrics)
	}
	c := mustDeployment(t, sinkURIInputs(t)).Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ":"+strconv.Itoa(int(ports[render.PortHealth])) != config.DefaultHealthAddress ||
		":"+strconv.Itoa(int(ports[render.PortMetrics])) != config.DefaultMetricsAddress {
		t.Errorf("ports %v do not match the default listen addresses %s and %s", ports, config.DefaultHealthAddress, config.DefaultMetricsAddress)
	}
	for _, pr := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, dispatcher.PathHealthz}, {c.ReadinessProbe, dispatcher.PathReadyz}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Fatalf("missing HTTP probe for %s", pr.path)
		}
		if pr.probe.HTTPGet.Path != pr.path || pr.probe.HTTPGet.Port.IntVal != ports[render.PortHealth] {
			t.Errorf("probe %s on port %v, want %s on %d", pr.probe.HTTPGet.Path, pr.probe.HTTPGet.Port, pr.path, ports[render.PortHealth])
		}
	}
}

// TestGracePeriodCoversTheShutdown: the pod's terminationGracePeriodSeconds is drainTimeout plus
// ShutdownMargin, and that margin covers every bounded step of the dispatcher's stop after its drain.
func TestGracePeriodCoversTheShutdown(t *testing.T) {
	after := dispatcher.ShutdownAfterDrain + circuitstate.RemoveTimeout + time.Second // + the server's shutdown (cmd/dispatcher)
	if margin := time.Duration(render.ShutdownMargin) * time.Second; margin < after+2*time.Second {
		t.Fatalf("ShutdownMargin %v does not cover the stop after the drain (%v) with 2s to spare", margin, after)
	}
	d := mustDeployment(t, sinkURIInputs(t))
	want := int64(config.DefaultDrainTimeout.Seconds()) + render.ShutdownMargin
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != want {
		t.Fatalf("terminationGracePeriodSeconds %v, want drainTimeout + ShutdownMargin = %d", g, want)
	}
}

func TestTemplateModeKeepsWhatTheUserSet(t *testing.T) {
	in := templateUserSettingsInputs(t)
	user := in.Pipeline.Spec.Template.DeepCopy()
	dep := mustDeployment(t, in)
	tmpl := dep.Spec.Template
	pod := tmpl.Spec

	if !reflect.DeepEqual(in.Pipeline.Spec.Template, user) {
		t.Fatal("Deployment modified the pipeline's template")
	}
	for k, v := range user.Metadata.Labels {
		if tmpl.Labels[k] != v {
			t.Errorf("pod label %s=%q, the user set %q", k, tmpl.Labels[k], v)
		}
	}
	for k, v := range render.SelectorLabels(in.Pipeline) {
		if tmpl.Labels[k] != v || dep.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("selector label %s=%s missing", k, v)
		}
	}
	if tmpl.Annotations["example.com/owner"] != "docs-team" || tmpl.Annotations[render.AnnotationConfigHash] == "" {
		t.Errorf("annotations %v lack the user's or the config hash", tmpl.Annotations)
	}
	if !reflect.DeepEqual(pod.SecurityContext.SeccompProfile, user.Spec.SecurityContext.SeccompProfile) ||
		ptr.Deref(pod.SecurityContext.RunAsUser, 0) != 1000 || ptr.Deref(pod.SecurityContext.FSGroup, 0) != 2000 {
		t.Errorf("pod security context %+v, want the user's", pod.SecurityContext)
	}
	if pod.SecurityContext.RunAsNonRoot != nil {
		t.Error("runAsNonRoot was set at pod level, which would block the container that runs as root")
	}
	if pod.ServiceAccountName != "embedder" || ptr.Deref(pod.TerminationGracePeriodSeconds, 0) != 120 || !reflect.DeepEqual(pod.Affinity, user.Spec.Affinity) {
		t.Error("the user's serviceAccountName, terminationGracePeriodSeconds or affinity changed")
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Image != "ghcr.io/example/fetch:1" {
		t.Errorf("init containers %+v", pod.InitContainers)
	}
	for _, v := range user.Spec.Volumes {
		found := false
		for _, got := range pod.Volumes {
			found = found || reflect.DeepEqual(got, v)
		}
		if !found {
			t.Errorf("user volume %s lost or changed", v.Name)
		}
	}

	embedder, proxy := pod.Containers[0], pod.Containers[1]
	env := func(c corev1.Container) map[string][]corev1.EnvVar {
		out := map[string][]corev1.EnvVar{}
		for _, e := range c.Env {
			out[e.Name] = append(out[e.Name], e)
		}
		return out
	}
	e := env(embedder)
	if got := e[config.EnvTopicPrimary]; len(got) != 1 || got[0].Value != "documents.chunks.v2" || got[0].ValueFrom != nil {
		t.Errorf("%s = %+v, want only the user's value", config.EnvTopicPrimary, got)
	}
	if got := e["LOG_LEVEL"]; len(got) != 1 || got[0].Value != "debug" {
		t.Errorf("LOG_LEVEL = %+v", got)
	}
	for _, name := range []string{config.EnvConfig, config.EnvBootstrapServers, config.EnvTopicRetry, config.EnvTopicDLQ, config.EnvConsumerGroup, config.EnvMaxAttempts, config.EnvBaseDelaySeconds, config.EnvMaxDelaySeconds} {
		if len(e[name]) != 1 {
			t.Errorf("container embedder has %d %s, want 1", len(e[name]), name)
		}
	}
	if got := env(proxy)[config.EnvMaxAttempts]; len(got) != 1 || got[0].ValueFrom == nil || got[0].ValueFrom.FieldRef == nil {
		t.Errorf("the proxy's own %s was replaced: %+v", config.EnvMaxAttempts, got)
	}
	if _, ok := env(pod.InitContainers[0])[config.EnvConfig]; ok {
		t.Error("init containers got the pipeline's environment")
	}

	s := embedder.SecurityContext
	if ptr.Deref(s.ReadOnlyRootFilesystem, true) || !reflect.DeepEqual(s.Capabilities, user.Spec.Containers[0].SecurityContext.Capabilities) {
		t.Errorf("embedder security context %+v overrides the user's", s)
	}
	if !ptr.Deref(s.RunAsNonRoot, false) || ptr.Deref(s.AllowPrivilegeEscalation, true) {
		t.Errorf("embedder security context %+v lacks the defaults for the fields the user left unset", s)
	}
	ps := proxy.SecurityContext
	if !ptr.Deref(ps.AllowPrivilegeEscalation, false) || ptr.Deref(ps.RunAsUser, -1) != 0 || ps.RunAsNonRoot != nil {
		t.Errorf("proxy security context %+v overrides the user's (root, privilege escalation)", ps)
	}
	if !ptr.Deref(ps.ReadOnlyRootFilesystem, false) {
		t.Error("proxy did not get readOnlyRootFilesystem, which the user left unset")
	}
	if got := embedder.VolumeMounts[:2]; !reflect.DeepEqual(got, user.Spec.Containers[0].VolumeMounts) {
		t.Errorf("embedder mounts %+v, the user's first", got)
	}
}

func TestTemplateModeRejectsTheOperatorsReservedNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.PodSpec)
		field  string
	}{
		{"a volume named like the config volume", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: render.ConfigVolume})
		}, "spec.template.spec.volumes[0].name"},
		{"a mount at the config directory", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "mine"})
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "mine", MountPath: render.ConfigDir})
		}, "spec.template.spec.containers[0].volumeMounts"},
		{"no container", func(s *corev1.PodSpec) { s.Containers = nil }, "spec.template.spec.containers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := templateMinimalInputs(t)
			tc.change(&in.Pipeline.Spec.Template.Spec)
			_, err := render.Deployment(in, "hash")
			var se *render.SpecError
			if !errors.As(err, &se) || se.Field != tc.field {
				t.Fatalf("error %v, want a SpecError on %s", err, tc.field)
			}
		})
	}
}
