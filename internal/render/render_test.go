package render_test

import (
	"encoding/json"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
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
		in.Policy.Spec.Backoff = retryv1alpha1.Backoff{InitialDelay: dur(500 * time.Millisecond), Multiplier: "1.5", MaxDelay: dur(1250 * time.Millisecond)}
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
			in.Policy.Spec.Classification.DefaultAction = retryv1alpha1.DefaultAction(retryv1alpha1.ActionRetry)
		}, true},
		{"changes when the DLQ topic changes", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Topic.Name = "chatbot.dlq.v2"
		}, true},
		{"changes when the DLQ moves to its own cluster", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"other:9092"}}
		}, true},
		{"changes when a SASL Secret is referenced", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: in.DefaultBootstrapServers,
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "user-a"}}}
		}, true},
		{"changes when the sink changes", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Sink.URI = "http://orchestrator.default.svc:8080/v2/tasks"
		}, true},
		{"does not change when only the pipeline's alert thresholds change", func(_ *testing.T, in *render.Inputs) {
			in.Pipeline.Spec.Alerts.MaxConsumerLag = ptr.To[int64](7)
		}, false},
		{"does not change when only the DLQ's alert thresholds change", func(_ *testing.T, in *render.Inputs) {
			in.DLQ.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](1)}
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
			expect := func(k *config.Kafka, spec *retryv1alpha1.KafkaConnection) {
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
