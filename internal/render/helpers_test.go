package render_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/retry"
)

const testImage = "ghcr.io/retryops/retry-dispatcher:v0.1.0"

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

func pdur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// chatbotPolicy is seed 000's policy (6 deliveries, 2s..32s, additive jitter) with a circuit breaker.
func chatbotPolicy() *retryv1alpha1.RetryPolicy {
	return &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "chatbot", Namespace: "shop"},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: 6,
			Backoff: retryv1alpha1.Backoff{
				InitialDelay: dur(2 * time.Second),
				Multiplier:   "2",
				MaxDelay:     dur(300 * time.Second),
				Jitter:       &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterAdditive, Max: pdur(time.Second)},
				Cap:          retryv1alpha1.CapAfterJitter,
			},
			Classification: &retryv1alpha1.Classification{
				DefaultAction: retryv1alpha1.DefaultAction(retry.ActionDeadLetter),
				Rules: []retryv1alpha1.ClassificationRule{
					{Name: "transient-http", Action: retryv1alpha1.ActionRetry, HTTPStatuses: []retryv1alpha1.HTTPStatusMatch{"408", "429", "500-599"}},
				},
			},
			CircuitBreaker: &retryv1alpha1.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 10, Window: pdur(time.Minute), OpenDuration: pdur(30 * time.Second), HalfOpenRequests: 5, CloseSuccessPercent: 80},
		},
	}
}

// documentsPolicy is seed 003's policy (5 deliveries, 10m, 20m, 40m, 60m; no jitter; no breaker).
func documentsPolicy() *retryv1alpha1.RetryPolicy {
	return &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "documents", Namespace: "shop"},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: 5,
			Backoff: retryv1alpha1.Backoff{
				InitialDelay: dur(10 * time.Minute),
				Multiplier:   "2",
				MaxDelay:     dur(60 * time.Minute),
			},
		},
	}
}

func defaultDLQ() *retryv1alpha1.DeadLetterQueue {
	return &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "chatbot-dlq", Namespace: "shop"},
		Spec:       retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: "chatbot.dlq"}},
	}
}

// tiers computes the retry tiers the way the pipeline controller does.
func tiers(t *testing.T, p *retryv1alpha1.ConsumerPipeline, rp *retryv1alpha1.RetryPolicy) config.Tiers {
	t.Helper()
	comp, err := retry.Compile(policy.FromSpec(rp.Spec))
	if err != nil {
		t.Fatalf("compiling the policy: %v", err)
	}
	naming := retryv1alpha1.NamingByAttempt
	if p.Spec.RetryTopics != nil && p.Spec.RetryTopics.Naming != "" {
		naming = p.Spec.RetryTopics.Naming
	}
	return config.BuildTiers(config.TierBase("", p.Namespace, p.Name), config.RetryTopicNaming(naming), comp.Plan())
}

func inputs(t *testing.T, p *retryv1alpha1.ConsumerPipeline, rp *retryv1alpha1.RetryPolicy, dlq *retryv1alpha1.DeadLetterQueue) *render.Inputs {
	t.Helper()
	return &render.Inputs{
		Pipeline:                p,
		Policy:                  rp,
		DLQ:                     dlq,
		Tiers:                   tiers(t, p, rp),
		DefaultBootstrapServers: []string{"kafka.kafka.svc:9092"},
		DispatcherImage:         testImage,
	}
}

// sinkURIInputs: the chat pipeline of the samples, sink by URI, everything on the default cluster.
func sinkURIInputs(t *testing.T) *render.Inputs {
	p := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "shop"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "alice_tasks", ConsumerGroup: "alice-orchestrator"},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "chatbot"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "chatbot-dlq"},
			Delivery:           &retryv1alpha1.Delivery{Ordering: retryv1alpha1.OrderingOrdered, MaxInFlight: ptr.To[int32](100)},
			Sink:               &retryv1alpha1.Sink{URI: "http://orchestrator.default.svc:8080/tasks"},
			Replicas:           ptr.To[int32](2),
			Alerts:             &retryv1alpha1.PipelineAlerts{MaxConsumerLag: ptr.To[int64](1000), MaxRetryBacklog: ptr.To[int64](1000), For: pdur(5 * time.Minute)},
		},
	}
	return inputs(t, p, chatbotPolicy(), defaultDLQ())
}

// securedDefaultInputs: the pipeline and its DLQ on the operator's default connection, which uses TLS
// with its own CA and server name, SCRAM and a client certificate: the CA goes into the ConfigMap,
// the namespace's consumer Secret (Strimzi's shape: the user named in sasl.jaas.config) is mounted.
func securedDefaultInputs(t *testing.T) *render.Inputs {
	in := sinkURIInputs(t)
	in.Default = &render.DefaultConnection{
		TLS: true, CAPEM: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), ServerName: "kafka.internal",
		SASLMechanism: retryv1alpha1.SASLScramSHA512, ClientCert: true,
		Identity: &render.ConsumerIdentity{Secret: "shop-consumer", Username: "shop-consumer", PasswordKey: "password", CertKey: "user.crt", KeyKey: "user.key"},
	}
	return in
}

// sinkRefSecretsInputs: sink by Service reference, TLS (custom CA key, client certificate) and SASL
// on the source connection, the DLQ on its own cluster with its own SASL and TLS, ByDelay tiers.
func sinkRefSecretsInputs(t *testing.T) *render.Inputs {
	p := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "orders"},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "documents"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "orders-dlq"},
			RetryTopics:        &retryv1alpha1.RetryTopics{Naming: retryv1alpha1.NamingByDelay},
			Delivery: &retryv1alpha1.Delivery{Ordering: retryv1alpha1.OrderingUnordered, MaxInFlight: ptr.To[int32](50),
				Batch: &retryv1alpha1.DeliveryBatch{MaxRecords: ptr.To[int32](200), MaxBytes: ptr.To(resource.MustParse("2Mi")), MaxWait: pdur(100 * time.Millisecond)}},
			Sink:   &retryv1alpha1.Sink{Ref: &retryv1alpha1.SinkReference{Kind: "Service", Name: "orders-api", Port: 8080, Path: "/v1/orders"}},
			Alerts: &retryv1alpha1.PipelineAlerts{MaxConsumerLag: ptr.To[int64](5000)},
			Kafka: &retryv1alpha1.KafkaConnection{
				BootstrapServers: []string{"kafka-0.kafka:9093", "kafka-1.kafka:9093"},
				TLS: &retryv1alpha1.KafkaTLS{
					CASecretRef:         &retryv1alpha1.SecretKeyReference{Name: "kafka-ca", Key: "bundle.pem"},
					ClientCertSecretRef: &retryv1alpha1.SecretReference{Name: "orders-client-cert"},
					ServerName:          "kafka.internal",
				},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "orders-kafka-user"}},
			},
		},
	}
	dlq := &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-dlq", Namespace: "shop"},
		Spec: retryv1alpha1.DeadLetterQueueSpec{
			Topic: retryv1alpha1.DeadLetterTopic{Name: "orders.dlq"},
			Alerts: &retryv1alpha1.DeadLetterAlerts{
				MaxMessages: ptr.To[int64](50), MaxMessagesFor: pdur(15 * time.Minute),
				MaxGrowthPerMinute: ptr.To[int32](3), MaxGrowthFor: pdur(3 * time.Minute),
				MaxOldestAge: pdur(2 * time.Hour),
			},
			Kafka: &retryv1alpha1.KafkaConnection{
				BootstrapServers: []string{"dlq-kafka.ops:9093"},
				TLS:              &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "dlq-kafka-ca"}},
				SASL:             &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "dlq-kafka-user"}},
			},
		},
	}
	in := inputs(t, p, documentsPolicy(), dlq)
	in.RuleLabels = map[string]string{"release": "prometheus"}
	return in
}

// templateMinimalInputs: the documents sample, library mode with one bare container.
func templateMinimalInputs(t *testing.T) *render.Inputs {
	p := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "documents", Namespace: "docs"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "documents.chunks"},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "documents"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "chatbot-dlq"},
			RetryTopics:        &retryv1alpha1.RetryTopics{Naming: retryv1alpha1.NamingByDelay},
			Template: &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:  "embedder",
				Image: "ghcr.io/example/embedder:1.4.2",
			}}}},
		},
	}
	dlq := defaultDLQ()
	dlq.Namespace = "docs"
	return inputs(t, p, documentsPolicy(), dlq)
}

// templateUserSettingsInputs: a template that sets env (one of ours among them), volumes, security
// contexts, labels, annotations and more, all of which must survive.
func templateUserSettingsInputs(t *testing.T) *render.Inputs {
	in := templateMinimalInputs(t)
	p := in.Pipeline
	p.Name = "embedder"
	p.Spec.Replicas = ptr.To[int32](3)
	p.Spec.Template = &retryv1alpha1.PodTemplate{
		Metadata: &retryv1alpha1.PodTemplateMetadata{
			Labels:      map[string]string{"app": "embedder", "app.kubernetes.io/name": "embedder", "team": "docs"},
			Annotations: map[string]string{"example.com/owner": "docs-team"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:            "embedder",
			TerminationGracePeriodSeconds: ptr.To[int64](120),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      ptr.To[int64](1000),
				FSGroup:        ptr.To[int64](2000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/embedder.json")},
			},
			InitContainers: []corev1.Container{{
				Name:    "fetch-model",
				Image:   "ghcr.io/example/fetch:1",
				Command: []string{"/fetch", "--to=/models"},
				VolumeMounts: []corev1.VolumeMount{{
					Name: "models", MountPath: "/models",
				}},
			}},
			Containers: []corev1.Container{{
				Name:  "embedder",
				Image: "ghcr.io/example/embedder:1.4.2",
				Env: []corev1.EnvVar{
					{Name: config.EnvTopicPrimary, Value: "documents.chunks.v2"},
					{Name: "LOG_LEVEL", Value: "debug"},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "models", MountPath: "/models", ReadOnly: true}, {Name: "scratch", MountPath: "/tmp"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
				}},
				SecurityContext: &corev1.SecurityContext{
					ReadOnlyRootFilesystem: ptr.To(false),
					Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
				},
			}, {
				Name:  "metrics-proxy",
				Image: "ghcr.io/example/proxy:2",
				Env:   []corev1.EnvVar{{Name: config.EnvMaxAttempts, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser:                ptr.To[int64](0),
					AllowPrivilegeEscalation: ptr.To(true),
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "models", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: "example.com/gpu", Operator: corev1.NodeSelectorOpExists,
				}}}},
			}}},
		},
	}
	return in
}
