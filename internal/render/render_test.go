package render_test

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/circuitstate"
	"github.com/retryops/retry-operator/internal/dispatcher"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/internal/retry"
)

var allCases = []struct {
	name   string
	inputs func(*testing.T) *render.Inputs
}{
	{"sink mode with a URI", sinkURIInputs},
	{"sink mode with a Service, Secrets and a DLQ on its own cluster", sinkRefSecretsInputs},
	{"template mode, minimal", templateMinimalInputs},
	{"template mode with the user's settings", templateUserSettingsInputs},
	{"template mode with fractional delays and one delivery more than tiers", func(t *testing.T) *render.Inputs {
		in := templateMinimalInputs(t)
		in.Policy.Spec.Backoff = v1.Backoff{InitialDelay: dur(500 * time.Millisecond), Multiplier: "1.5", MaxDelay: dur(1250 * time.Millisecond)}
		in.Tiers = tiers(t, in.Pipeline, in.Policy)
		return in
	}},
	{"sink mode without retries", func(t *testing.T) *render.Inputs {
		in := sinkURIInputs(t)
		in.Policy.Spec.MaxAttempts = 1
		in.Tiers = nil
		return in
	}},
}

func mustConfigMap(t *testing.T, in *render.Inputs) *corev1.ConfigMap {
	t.Helper()
	cm, err := render.ConfigMap(in)
	if err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	return cm
}

func mustDeployment(t *testing.T, in *render.Inputs) *appsv1.Deployment {
	t.Helper()
	dep, err := render.Deployment(in, render.ConfigHash(mustConfigMap(t, in)))
	if err != nil {
		t.Fatalf("Deployment: %v", err)
	}
	return dep
}

func TestConfigHash(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, in *render.Inputs)
		changes bool
	}{
		{"does not change when nothing changes", func(*testing.T, *render.Inputs) {}, false},
		{"changes when the policy's maxAttempts changes", func(t *testing.T, in *render.Inputs) {
			in.Policy.Spec.MaxAttempts = 4
			in.Tiers = tiers(t, in.Pipeline, in.Policy)
		}, true},
		{"changes when the policy's classification changes", func(_ *testing.T, in *render.Inputs) {
			in.Policy.Spec.Classification.DefaultAction = v1.DefaultAction(v1.ActionRetry)
		}, true},
		{"changes when the DLQ topic changes", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Topic.Name = "chatbot.dlq.v2"
		}, true},
		{"changes when the DLQ moves to its own cluster", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{"other:9092"}}
		}, true},
		{"changes when a SASL Secret is referenced", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: in.DefaultBootstrapServers,
				SASL: &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: "user-a"}}}
		}, true},
		{"changes when the sink changes", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Sink.URI = "http://orchestrator.default.svc:8080/v2/tasks"
		}, true},
		{"does not change when only the pipeline's alert thresholds change", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Alerts.MaxConsumerLag = ptr.To[int64](7)
		}, false},
		{"does not change when only the DLQ's alert thresholds change", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Alerts = &v1.DeadLetterAlerts{MaxMessages: ptr.To[int64](1)}
		}, false},
		{"does not change when only the replicas change", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Replicas = ptr.To[int32](9)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := render.ConfigHash(mustConfigMap(t, sinkURIInputs(t)))
			in := sinkURIInputs(t)
			tc.change(t, in)
			after := render.ConfigHash(mustConfigMap(t, in))
			if (before != after) != tc.changes {
				t.Errorf("hash before %s, after %s; want changed=%v", before, after, tc.changes)
			}
			dep := mustDeployment(t, in)
			if got := dep.Spec.Template.Annotations[render.AnnotationConfigHash]; got != after {
				t.Errorf("pod template hash %q, want %q", got, after)
			}
		})
	}
}

func TestConfigHashChangesWhenAReferencedSecretIsRenamed(t *testing.T) {
	a := sinkRefSecretsInputs(t)
	b := sinkRefSecretsInputs(t)
	b.Pipeline.Spec.Kafka.SASL.SecretRef.Name = "orders-kafka-user-rotated"
	ha, hb := render.ConfigHash(mustConfigMap(t, a)), render.ConfigHash(mustConfigMap(t, b))
	if ha == hb {
		t.Error("renaming the SASL Secret left the hash unchanged")
	}
	c := sinkRefSecretsInputs(t)
	c.Pipeline.Spec.Kafka.TLS.CASecretRef.Key = "other.pem"
	if render.ConfigHash(mustConfigMap(t, c)) == ha {
		t.Error("changing the CA key left the hash unchanged")
	}
}

// TestNoSecretValueLeavesTheSecrets renders every object of a pipeline whose connections reference
// Secrets and checks that none of the Secrets' values appears anywhere, while the Secret names appear
// only as references.
func TestNoSecretValueLeavesTheSecrets(t *testing.T) {
	secrets := []corev1.Secret{
		{Data: map[string][]byte{"username": []byte("orders-svc-user"), "password": []byte("Sup3r-S3cret-P@ssw0rd!")}},
		{Data: map[string][]byte{"bundle.pem": []byte("-----BEGIN CERTIFICATE-----\nMIIFAKECAFAKECA\n-----END CERTIFICATE-----")}},
		{Data: map[string][]byte{"tls.key": []byte("-----BEGIN PRIVATE KEY-----\nMIIFAKEKEYFAKE\n-----END PRIVATE KEY-----")}},
		{Data: map[string][]byte{"username": []byte("dlq-user"), "password": []byte("dlq-pa55-w0rd")}},
	}
	in := sinkRefSecretsInputs(t)
	cm := mustConfigMap(t, in)
	dep := mustDeployment(t, in)
	rule, err := render.PrometheusRule(in)
	if err != nil {
		t.Fatal(err)
	}
	all, err := json.Marshal([]any{cm, dep, rule.Object})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		for k, v := range s.Data {
			if strings.Contains(string(all), string(v)) {
				t.Errorf("the value of key %s of a Secret appears in the rendered objects", k)
			}
		}
	}
	for k, v := range cm.Data {
		if strings.Contains(strings.ToLower(k), "password") || strings.Contains(v, "\"password\":") {
			t.Errorf("ConfigMap key %s carries a password field", k)
		}
	}
	cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.SASL == nil || !strings.HasPrefix(cfg.Kafka.SASL.PasswordFile, render.SecretsDir+"/") {
		t.Errorf("the SASL password is not a file under %s: %+v", render.SecretsDir, cfg.Kafka.SASL)
	}
}

// TestEverySecretFileOfTheConfigIsMounted checks that each file path in the config is the item of a
// Secret volume mounted (read-only) at that directory, from the Secret and key the resources name.
func TestEverySecretFileOfTheConfigIsMounted(t *testing.T) {
	for _, tc := range allCases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.inputs(t)
			cm := mustConfigMap(t, in)
			dep := mustDeployment(t, in)
			cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]))
			if err != nil {
				t.Fatal(err)
			}
			type file struct{ secret, key string }
			want := map[string]file{}
			expect := func(k *config.Kafka, spec *v1.KafkaConnection) {
				if k == nil {
					return
				}
				if k.TLS != nil && k.TLS.CAFile != "" {
					key := spec.TLS.CASecretRef.Key
					if key == "" {
						key = "ca.crt"
					}
					want[k.TLS.CAFile] = file{spec.TLS.CASecretRef.Name, key}
				}
				if k.TLS != nil && k.TLS.CertFile != "" {
					want[k.TLS.CertFile] = file{spec.TLS.ClientCertSecretRef.Name, "tls.crt"}
					want[k.TLS.KeyFile] = file{spec.TLS.ClientCertSecretRef.Name, "tls.key"}
				}
				if k.SASL != nil {
					want[k.SASL.UsernameFile] = file{spec.SASL.SecretRef.Name, "username"}
					want[k.SASL.PasswordFile] = file{spec.SASL.SecretRef.Name, "password"}
				}
			}
			expect(&cfg.Kafka, in.Pipeline.Spec.Kafka)
			expect(cfg.DeadLetterKafka, in.DLQ.Spec.Kafka)

			pod := dep.Spec.Template.Spec
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			for _, c := range pod.Containers {
				got := map[string]file{}
				for _, m := range c.VolumeMounts {
					v, ok := volumes[m.Name]
					if !ok || v.Secret == nil {
						continue
					}
					if !m.ReadOnly {
						t.Errorf("container %s mounts Secret volume %s writable", c.Name, m.Name)
					}
					for _, it := range v.Secret.Items {
						got[path.Join(m.MountPath, it.Path)] = file{v.Secret.SecretName, it.Key}
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("container %s mounts %v, the config expects %v", c.Name, got, want)
				}
				var cfgMounted bool
				for _, m := range c.VolumeMounts {
					if m.MountPath == render.ConfigDir && m.ReadOnly && volumes[m.Name].ConfigMap != nil &&
						volumes[m.Name].ConfigMap.Name == cm.Name {
						cfgMounted = true
					}
				}
				if !cfgMounted {
					t.Errorf("container %s does not mount ConfigMap %s read-only at %s", c.Name, cm.Name, render.ConfigDir)
				}
			}
		})
	}
}

// TestRenderedConfigLoadsInTheDataPlane parses the rendered file the way the dispatcher does and
// validates it; the only problems allowed are the Secret files, which exist only in the pod.
func TestRenderedConfigLoadsInTheDataPlane(t *testing.T) {
	for _, tc := range allCases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.inputs(t)
			cm := mustConfigMap(t, in)
			cfg, err := config.Parse([]byte(cm.Data[render.ConfigKey]))
			if err != nil {
				t.Fatalf("the dispatcher cannot parse the rendered config: %v", err)
			}
			again := *cfg
			again.Default()
			if !reflect.DeepEqual(&again, cfg) {
				t.Error("the rendered config is not complete: Default changes it")
			}
			if err := cfg.Validate(); err != nil {
				var ve *config.ValidationError
				if !errors.As(err, &ve) {
					t.Fatal(err)
				}
				for _, p := range ve.Problems {
					if !strings.Contains(p, "is the Secret mounted?") {
						t.Errorf("invalid config: %s", p)
					}
				}
			}
			if got, want := cfg.Topics.Retries, in.Tiers; !reflect.DeepEqual(got, want) {
				t.Errorf("tiers %+v, want the controller's %+v", got, want)
			}
			if in.Pipeline.Spec.Sink != nil && (cfg.Sink == nil || cfg.Sink.URL != render.SinkURL(in.Pipeline)) {
				t.Errorf("sink %+v, want %s", cfg.Sink, render.SinkURL(in.Pipeline))
			}
			if in.Pipeline.Spec.Template != nil && cfg.Sink != nil {
				t.Errorf("template mode has a sink: %+v", cfg.Sink)
			}
		})
	}
}

// TestSeedEnvironmentAgreesWithTheFile checks the library mode's view: the config file plus the
// seed-style variables of the ConfigMap (which override it) load to the same config as the file.
func TestSeedEnvironmentAgreesWithTheFile(t *testing.T) {
	for _, tc := range allCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := mustConfigMap(t, tc.inputs(t))
			file, err := config.Parse([]byte(cm.Data[render.ConfigKey]))
			if err != nil {
				t.Fatal(err)
			}
			withEnv, _ := config.Parse([]byte(cm.Data[render.ConfigKey]))
			var seen int
			getenv := func(name string) string {
				if name == config.EnvConfig || name == config.EnvSinkURL {
					return ""
				}
				v, ok := cm.Data[name]
				if !ok && (name != config.EnvTopicRetry || len(file.Topics.Retries) > 0) {
					t.Errorf("the ConfigMap lacks %s", name)
				}
				seen++
				return v
			}
			if err := withEnv.ApplyEnv(getenv); err != nil {
				t.Fatalf("ApplyEnv: %v", err)
			}
			withEnv.Default()
			if !reflect.DeepEqual(withEnv, file) {
				a, _ := json.Marshal(file)
				b, _ := json.Marshal(withEnv)
				t.Errorf("the environment changes the config:\nfile: %s\nenv:  %s", a, b)
			}
			if seen != len(config.EnvVars)-2 {
				t.Errorf("read %d variables, want %d", seen, len(config.EnvVars)-2)
			}
		})
	}
}

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
		// A token only for the circuit report, to which the ServiceAccount is limited.
		reports := in.Policy.Spec.CircuitBreaker != nil
		if got := ptr.Deref(pod.AutomountServiceAccountToken, true); got != reports {
			t.Errorf("automountServiceAccountToken %v, want %v (the policy has a circuit breaker: %v)", got, reports, reports)
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
			t.Errorf("env %+v, want %s=%s (and %s from metadata.name when the policy has a circuit breaker), then %s", env, config.EnvConfig, render.ConfigFile, config.EnvPodName, render.EnvGoMemLimit)
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

func TestSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*render.Inputs)
	}{
		{"no bootstrap servers anywhere", func(in *render.Inputs) { in.DefaultBootstrapServers = nil }},
		{"both sink and template", func(in *render.Inputs) {
			in.Pipeline.Spec.Template = &v1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		}},
		{"neither sink nor template", func(in *render.Inputs) { in.Pipeline.Spec.Sink = nil }},
		{"both sink.uri and sink.ref", func(in *render.Inputs) { in.Pipeline.Spec.Sink.Ref = &v1.SinkReference{Name: "svc"} }},
		{"an invalid policy", func(in *render.Inputs) { in.Policy.Spec.Backoff.Multiplier = "x" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sinkURIInputs(t)
			tc.change(in)
			for what, err := range map[string]error{
				"ConfigMap":  second(render.ConfigMap(in)),
				"Deployment": second(render.Deployment(in, "hash")),
			} {
				var se *render.SpecError
				if !errors.As(err, &se) {
					t.Errorf("%s: error %v, want a *SpecError", what, err)
				}
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

// TestKafkaConnectionSpecErrors: a resource without its own bootstrap servers uses the default
// connection whole, so tls or sasl without them is invalid input (objects stored before the CEL rule),
// and so is SASL PLAIN without TLS unless allowed.
func TestKafkaConnectionSpecErrors(t *testing.T) {
	plain := func(allow v1.PlaintextPassword) *v1.KafkaSASL {
		return &v1.KafkaSASL{Mechanism: v1.SASLPlain, SecretRef: v1.SecretReference{Name: "u"}, PlaintextPassword: allow}
	}
	for _, tc := range []struct {
		name   string
		change func(*render.Inputs)
		field  string // "": no error
		text   string
	}{
		{"a DLQ with its own credentials on the default cluster", func(in *render.Inputs) {
			in.DLQ.Spec.Kafka = &v1.KafkaConnection{SASL: &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: "u"}}}
		}, "DeadLetterQueue chatbot-dlq spec.kafka", "tls and sasl apply only with bootstrapServers"},
		{"a pipeline with only tls", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &v1.KafkaConnection{TLS: &v1.KafkaTLS{CASecretRef: &v1.SecretKeyReference{Name: "ca"}}}
		}, "spec.kafka", "the operator's default connection"},
		{"PLAIN without TLS", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain("")}
		}, "spec.kafka.sasl", "SASL PLAIN without TLS"},
		{"PLAIN without TLS on the DLQ, refused explicitly", func(in *render.Inputs) {
			in.DLQ.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain(v1.PlaintextPasswordRefuse)}
		}, "DeadLetterQueue chatbot-dlq spec.kafka.sasl", "SASL PLAIN without TLS"},
		{"PLAIN without TLS, allowed", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain(v1.PlaintextPasswordAllow)}
		}, "", ""},
		{"PLAIN over TLS", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}, TLS: &v1.KafkaTLS{}, SASL: plain("")}
		}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sinkURIInputs(t)
			tc.change(in)
			_, err := render.Config(in)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *render.SpecError
			if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Message, tc.text) {
				t.Fatalf("error %v, want a SpecError on %s saying %q", err, tc.field, tc.text)
			}
		})
	}
}

func TestCallerMistakesAreNotSpecErrors(t *testing.T) {
	in := sinkURIInputs(t)
	for what, err := range map[string]error{
		"no hash":  second(render.Deployment(in, "")),
		"no image": second(render.Deployment(&render.Inputs{Pipeline: in.Pipeline, Policy: in.Policy, DLQ: in.DLQ, Tiers: in.Tiers, DefaultBootstrapServers: in.DefaultBootstrapServers}, "h")),
		"no tiers": second(render.ConfigMap(&render.Inputs{Pipeline: in.Pipeline, Policy: in.Policy, DLQ: in.DLQ, DefaultBootstrapServers: in.DefaultBootstrapServers})),
		"no DLQ":   second(render.ConfigMap(&render.Inputs{Pipeline: in.Pipeline, Policy: in.Policy})),
	} {
		var se *render.SpecError
		if err == nil || errors.As(err, &se) {
			t.Errorf("%s: error %v, want a plain error", what, err)
		}
	}
}

func TestSinkURL(t *testing.T) {
	p := &v1.ConsumerPipeline{}
	p.Namespace = "shop"
	for _, tc := range []struct {
		sink *v1.Sink
		want string
	}{
		{&v1.Sink{URI: "https://api.example.com/hook"}, "https://api.example.com/hook"},
		{&v1.Sink{Ref: &v1.SinkReference{Name: "orders-api", Port: 8080, Path: "/v1/orders"}}, "http://orders-api.shop.svc:8080/v1/orders"},
		{&v1.Sink{Ref: &v1.SinkReference{Name: "orders-api"}}, "http://orders-api.shop.svc:80/"},
		{nil, ""},
	} {
		p.Spec.Sink = tc.sink
		if got := render.SinkURL(p); got != tc.want {
			t.Errorf("SinkURL(%+v) = %q, want %q", tc.sink, got, tc.want)
		}
	}
}

func TestTheDeadLetterConnection(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pipeline *v1.KafkaConnection
		dlq      *v1.KafkaConnection
		want     []string // nil: the DLQ shares the source connection
	}{
		{"both on the default cluster share it", nil, nil, nil},
		{"an identical explicit connection is shared", &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, nil},
		{"a pipeline on its own cluster leaves the DLQ on the default one", &v1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, nil, []string{"kafka.kafka.svc:9092"}},
		{"a DLQ with its own credentials on the default cluster's servers (named) is separate", nil,
			&v1.KafkaConnection{BootstrapServers: []string{"kafka.kafka.svc:9092"},
				SASL: &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: "u"}}}, []string{"kafka.kafka.svc:9092"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sinkURIInputs(t)
			in.Pipeline.Spec.Kafka, in.DLQ.Spec.Kafka = tc.pipeline, tc.dlq
			cfg, err := render.Config(in)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == nil && cfg.DeadLetterKafka != nil:
				t.Errorf("deadLetterKafka %+v, want none", cfg.DeadLetterKafka)
			case tc.want != nil && (cfg.DeadLetterKafka == nil || !reflect.DeepEqual(cfg.DeadLetterKafka.BootstrapServers, tc.want)):
				t.Errorf("deadLetterKafka %+v, want servers %v", cfg.DeadLetterKafka, tc.want)
			}
		})
	}
}

func TestLongNamesGiveValidObjects(t *testing.T) {
	in := sinkURIInputs(t)
	in.Pipeline.Name = strings.Repeat("a", 250) + ".b"
	in.Pipeline.Spec.Source.ConsumerGroup = ""
	cm := mustConfigMap(t, in)
	dep := mustDeployment(t, in)
	rule, err := render.PrometheusRule(in)
	if err != nil {
		t.Fatal(err)
	}
	acm, err := render.AlertConfigMap(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{cm.Name, dep.Name, rule.GetName(), acm.Name} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("name %q: %v", name, errs)
		}
	}
	for _, labels := range []map[string]string{cm.Labels, dep.Labels, dep.Spec.Template.Labels, dep.Spec.Selector.MatchLabels, rule.GetLabels(), acm.Labels} {
		for k, v := range labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("label %s=%q: %v", k, v, errs)
			}
		}
	}
	for k := range acm.Data {
		if errs := validation.IsConfigMapKey(k); len(errs) > 0 {
			t.Errorf("ConfigMap key %q: %v", k, errs)
		}
	}
	if render.DeploymentName(in.Pipeline) != dep.Name {
		t.Error("names are not deterministic")
	}
	other := in.Pipeline.DeepCopy()
	other.Name = strings.Repeat("a", 250) + ".c"
	if render.DeploymentName(other) == dep.Name {
		t.Error("two long names that differ only at the end map to the same Deployment")
	}
}

// TestRenderUsesTheCompiledPolicy: Inputs.Compiled, when set, is what rendering uses (the reconciler
// hands in the policy.Cache's result, so a reconcile compiles nothing again): a spec that would not
// compile renders when its compiled form is given, and is refused when it must be compiled.
func TestRenderUsesTheCompiledPolicy(t *testing.T) {
	in := sinkURIInputs(t)
	comp, err := retry.Compile(policy.FromSpec(in.Policy.Spec))
	if err != nil {
		t.Fatal(err)
	}
	in.Policy.Spec.Classification = &v1.Classification{DefaultAction: "Retry", Rules: []v1.ClassificationRule{
		{Name: "broken", Action: v1.ActionRetry, MessagePatterns: []string{"(unclosed"}}}}
	if _, err := render.Config(in); err == nil {
		t.Fatal("a policy whose pattern does not compile rendered without Inputs.Compiled")
	}
	in.Compiled = comp
	if _, err := render.Config(in); err != nil {
		t.Fatalf("with Inputs.Compiled the policy is not compiled again: %v", err)
	}
}
