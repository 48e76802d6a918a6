package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

func d(s string) metav1.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: v}
}

func dp(s string) *metav1.Duration { v := d(s); return &v }

// newNamespace creates a namespace for one test and returns its name.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "v1alpha1-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

func validPolicy(ns string) *retryv1alpha1.RetryPolicy {
	return &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "rp-", Namespace: ns},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: 4,
			Backoff: retryv1alpha1.Backoff{
				InitialDelay: d("1s"), Multiplier: "2", MaxDelay: d("10s"),
				Jitter: &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterProportional, MinPercent: ptr.To[int32](80), MaxPercent: ptr.To[int32](120)},
			},
			Classification: &retryv1alpha1.Classification{Rules: []retryv1alpha1.ClassificationRule{
				{Name: "transient", Action: retryv1alpha1.ActionRetry, HTTPStatuses: []retryv1alpha1.HTTPStatusMatch{"429", "500-599"}},
			}},
		},
	}
}

func validDLQ(ns string) *retryv1alpha1.DeadLetterQueue {
	return &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "dlq-", Namespace: ns},
		Spec: retryv1alpha1.DeadLetterQueueSpec{
			Topic:     retryv1alpha1.DeadLetterTopic{Name: "orders.dlq", Partitions: 3},
			Retention: &retryv1alpha1.DeadLetterRetention{MaxAge: dp("168h"), MaxMessages: ptr.To[int64](10000)},
		},
	}
}

func validPipeline(ns string) *retryv1alpha1.ConsumerPipeline {
	return &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cpl-", Namespace: ns},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "orders", Create: &retryv1alpha1.TopicCreation{Partitions: 3}},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "orders"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "orders-dlq"},
			Sink:               &retryv1alpha1.Sink{URI: "http://orders.default.svc:8080/in"},
		},
	}
}

func podTemplate() *retryv1alpha1.PodTemplate {
	return &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/consumer:1"}}}}
}

// The base objects themselves must be accepted, or every rejection below would prove nothing.
func TestValidBaseObjectsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	for _, obj := range []client.Object{validPolicy(ns), validDLQ(ns), validPipeline(ns)} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Errorf("valid %T rejected: %v", obj, err)
		}
	}
}

// The Kafka connections the CEL rules on KafkaConnection must let through.
func TestValidKafkaConnectionsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	sasl := func(m retryv1alpha1.SASLMechanism, allow retryv1alpha1.PlaintextPassword) *retryv1alpha1.KafkaSASL {
		return &retryv1alpha1.KafkaSASL{Mechanism: m, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}, PlaintextPassword: allow}
	}
	for name, k := range map[string]*retryv1alpha1.KafkaConnection{
		"empty: the default connection":         {},
		"own servers only":                      {BootstrapServers: []string{"kafka:9092"}},
		"own servers, TLS and PLAIN":            {BootstrapServers: []string{"kafka:9093"}, TLS: &retryv1alpha1.KafkaTLS{}, SASL: sasl(retryv1alpha1.SASLPlain, "")},
		"own servers and SCRAM without TLS":     {BootstrapServers: []string{"kafka:9092"}, SASL: sasl(retryv1alpha1.SASLScramSHA512, "")},
		"PLAIN without TLS, allowed explicitly": {BootstrapServers: []string{"kafka:9092"}, SASL: sasl(retryv1alpha1.SASLPlain, retryv1alpha1.PlaintextPasswordAllow)},
	} {
		q := validDLQ(ns)
		q.Spec.Kafka = k
		if err := env.Client.Create(context.Background(), q); err != nil {
			t.Errorf("%s rejected: %v", name, err)
		}
	}
	// plaintextPassword defaults to Refuse.
	q := validDLQ(ns)
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9093"}, TLS: &retryv1alpha1.KafkaTLS{}, SASL: sasl(retryv1alpha1.SASLPlain, "")}
	if err := env.Client.Create(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	if got := q.Spec.Kafka.SASL.PlaintextPassword; got != retryv1alpha1.PlaintextPasswordRefuse {
		t.Errorf("plaintextPassword defaulted to %q, want Refuse", got)
	}
}

func TestInvalidObjectsAreRejectedWithTheirMessage(t *testing.T) {
	ns := newNamespace(t)
	type tc struct {
		name string
		obj  func() client.Object
		want []string // substrings of the API server's message
	}
	rp := func(mut func(*retryv1alpha1.RetryPolicy)) func() client.Object {
		return func() client.Object { p := validPolicy(ns); mut(p); return p }
	}
	dlq := func(mut func(*retryv1alpha1.DeadLetterQueue)) func() client.Object {
		return func() client.Object { q := validDLQ(ns); mut(q); return q }
	}
	cpl := func(mut func(*retryv1alpha1.ConsumerPipeline)) func() client.Object {
		return func() client.Object { p := validPipeline(ns); mut(p); return p }
	}
	cases := []tc{
		{"zero attempts", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.MaxAttempts = 0 }), []string{"spec.maxAttempts", "greater than or equal to 1"}},
		{"more than 100 attempts", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.MaxAttempts = 101 }), []string{"spec.maxAttempts", "less than or equal to 100"}},
		{"cap below the initial delay", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.MaxDelay = d("500ms") }), []string{"backoff.maxDelay must be at least backoff.initialDelay"}},
		{"multiplier below one", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Multiplier = "0.5" }), []string{"backoff.multiplier must be a decimal number from 1 to 9999"}},
		{"multiplier not a number", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Multiplier = "two" }), []string{"backoff.multiplier must be a decimal number"}},
		{"multiplier with too many decimals", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Multiplier = "1.1234567" }), []string{"at most 6 decimals"}},
		{"additive jitter without max", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Backoff.Jitter = &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterAdditive}
		}), []string{"jitter.max is required for mode Additive"}},
		{"max on a mode other than additive", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Backoff.Jitter = &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterFull, Max: dp("1s")}
		}), []string{"jitter.max is required for mode Additive and not allowed for other modes"}},
		{"proportional jitter without percents", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Backoff.Jitter = &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterProportional}
		}), []string{"jitter.minPercent and jitter.maxPercent are required for mode Proportional"}},
		{"percents on a mode other than proportional", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Backoff.Jitter = &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterNone, MinPercent: ptr.To[int32](80), MaxPercent: ptr.To[int32](120)}
		}), []string{"not allowed for other modes"}},
		{"Retry-After cap that is no duration", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.RetryAfter = &retryv1alpha1.RetryAfter{Mode: retryv1alpha1.RetryAfterHonor, MaxDelay: &metav1.Duration{Duration: -time.Minute}}
		}), []string{"spec.retryAfter.maxDelay", "should match"}},
		{"jitter minimum above 100 percent", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Jitter.MinPercent = ptr.To[int32](101) }), []string{"minPercent", "less than or equal to 100"}},
		{"jitter maximum below 100 percent", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Jitter.MaxPercent = ptr.To[int32](90) }), []string{"maxPercent", "greater than or equal to 100"}},
		{"unknown jitter mode", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Jitter.Mode = "Random" }), []string{"Unsupported value: \"Random\""}},
		{"unknown cap placement", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Backoff.Cap = "Sometimes" }), []string{"Unsupported value: \"Sometimes\""}},
		{"negative attempt timeout", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.AttemptTimeout = &metav1.Duration{Duration: -time.Second} }), []string{"spec.attemptTimeout", "should match"}},
		{"HTTP status above 599", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Classification.Rules[0].HTTPStatuses = []retryv1alpha1.HTTPStatusMatch{"600"}
		}), []string{"an HTTP status must be a code from 100 to 599"}},
		{"HTTP status below 100", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Classification.Rules[0].HTTPStatuses = []retryv1alpha1.HTTPStatusMatch{"99"}
		}), []string{"an HTTP status must be a code from 100 to 599"}},
		{"HTTP status class wildcard", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Classification.Rules[0].HTTPStatuses = []retryv1alpha1.HTTPStatusMatch{"5xx"}
		}), []string{"an HTTP status must be a code from 100 to 599"}},
		{"HTTP status range reversed", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Classification.Rules[0].HTTPStatuses = []retryv1alpha1.HTTPStatusMatch{"599-500"}
		}), []string{"an HTTP status range must run from low to high"}},
		{"rule without any matcher", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Classification.Rules[0].HTTPStatuses = nil }), []string{"a classification rule needs at least one of httpStatuses, errorTypes or messagePatterns"}},
		{"rule name with capitals", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Classification.Rules[0].Name = "Transient_HTTP" }), []string{"rules[0].name", "should match"}},
		{"two rules with one name", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.Classification.Rules = append(p.Spec.Classification.Rules, retryv1alpha1.ClassificationRule{Name: "transient", Action: retryv1alpha1.ActionDeadLetter, ErrorTypes: []string{"X"}})
		}), []string{"Duplicate value"}},
		{"rule allows more attempts than the policy", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Classification.Rules[0].MaxAttempts = ptr.To[int32](5) }), []string{"a classification rule's maxAttempts cannot exceed the policy's maxAttempts"}},
		{"unknown rule action", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Classification.Rules[0].Action = "Ignore" }), []string{"Unsupported value: \"Ignore\""}},
		{"drop as the default action", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Classification.DefaultAction = "Drop" }), []string{"defaultAction", "Unsupported value: \"Drop\""}},
		{"deadline before the first retry", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.Deadline = dp("500ms") }), []string{"deadline must be at least backoff.initialDelay"}},
		{"unknown Retry-After mode", rp(func(p *retryv1alpha1.RetryPolicy) { p.Spec.RetryAfter = &retryv1alpha1.RetryAfter{Mode: "Maybe"} }), []string{"Unsupported value: \"Maybe\""}},
		{"failure ratio above 100 percent", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.CircuitBreaker = &retryv1alpha1.CircuitBreaker{FailureRatioPercent: 101}
		}), []string{"failureRatioPercent", "less than or equal to 100"}},
		{"close ratio of 100 percent that can never be exceeded", rp(func(p *retryv1alpha1.RetryPolicy) {
			p.Spec.CircuitBreaker = &retryv1alpha1.CircuitBreaker{CloseSuccessPercent: 100}
		}), []string{"closeSuccessPercent", "less than or equal to 99"}},

		{"topic name with a space", dlq(func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Topic.Name = "orders dlq" }), []string{"spec.topic.name", "should match"}},
		{"topic name of two dots", dlq(func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Topic.Name = ".." }), []string{"a topic name cannot be '.' or '..'"}},
		{"topic name longer than Kafka allows", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Topic.Name = retryv1alpha1.TopicName(strings.Repeat("a", 250))
		}), []string{"spec.topic.name", "may not be more than 249"}},
		{"zero partitions", dlq(func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Topic.Partitions = -1 }), []string{"spec.topic.partitions", "greater than or equal to 1"}},
		{"age limit set twice", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Topic.Config = map[string]string{"retention.ms": "1000"}
		}), []string{"set the DLQ's age limit in retention.maxAge or in topic.config[\"retention.ms\"], not both"}},
		{"topic config key that is no Kafka config", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Topic.Config = map[string]string{"Compression Type": "zstd"}
		}), []string{"topic.config keys must be Kafka topic config names"}},
		{"zero messages retained", dlq(func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Retention.MaxMessages = ptr.To[int64](0) }), []string{"maxMessages", "greater than or equal to 1"}},
		{"unknown deletion policy", dlq(func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.DeletionPolicy = "Archive" }), []string{"Unsupported value: \"Archive\""}},
		{"unknown SASL mechanism", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9093"}, TLS: &retryv1alpha1.KafkaTLS{},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: "GSSAPI", SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}}}
		}), []string{"Unsupported value: \"GSSAPI\""}},
		{"sasl without bootstrap servers", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}}}
		}), []string{"kafka.tls and kafka.sasl apply only with kafka.bootstrapServers", "the operator's default connection (its servers, TLS and SASL) is used whole"}},
		{"tls without bootstrap servers", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Kafka = &retryv1alpha1.KafkaConnection{TLS: &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "kafka-ca"}}}
		}), []string{"kafka.tls and kafka.sasl apply only with kafka.bootstrapServers"}},
		{"PLAIN without TLS", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9092"}, SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}}}
		}), []string{"kafka.sasl.mechanism PLAIN without kafka.tls sends the password in clear text", "plaintextPassword: Allow"}},
		{"PLAIN without TLS, refused explicitly", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9092"},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}, PlaintextPassword: retryv1alpha1.PlaintextPasswordRefuse}}
		}), []string{"kafka.sasl.mechanism PLAIN without kafka.tls sends the password in clear text"}},
		{"unknown plaintextPassword", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9092"}, TLS: &retryv1alpha1.KafkaTLS{},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}, PlaintextPassword: "Sometimes"}}
		}), []string{"Unsupported value: \"Sometimes\""}},
		{"bootstrap server without a port", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka"}}
		}), []string{"bootstrapServers[0]", "should match"}},
		{"client certificate without bootstrap servers", dlq(func(q *retryv1alpha1.DeadLetterQueue) {
			q.Spec.Kafka = &retryv1alpha1.KafkaConnection{TLS: &retryv1alpha1.KafkaTLS{ClientCertSecretRef: &retryv1alpha1.SecretReference{Name: "client"}}}
		}), []string{"kafka.tls and kafka.sasl apply only with kafka.bootstrapServers"}},

		{"neither sink nor template", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Sink = nil }), []string{"set exactly one of sink"}},
		{"both sink and template", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Template = podTemplate() }), []string{"set exactly one of sink"}},
		{"sink URL with another scheme", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Sink.URI = "ftp://orders/in" }), []string{"sink.uri must be an absolute http:// or https:// URL"}},
		{"sink URL without a host", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Sink.URI = "/in" }), []string{"sink.uri must be an absolute http:// or https:// URL"}},
		{"sink with both a URL and a reference", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Sink.Ref = &retryv1alpha1.SinkReference{Name: "orders"}
		}), []string{"set exactly one of sink.uri and sink.ref"}},
		{"sink reference to a port out of range", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Sink = &retryv1alpha1.Sink{Ref: &retryv1alpha1.SinkReference{Name: "orders", Port: 70000}}
		}), []string{"port", "less than or equal to 65535"}},
		{"negative replicas", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Replicas = ptr.To[int32](-1) }), []string{"spec.replicas", "greater than or equal to 0"}},
		{"unknown retry topic naming", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{Naming: "ByColour"}
		}), []string{"Unsupported value: \"ByColour\""}},
		{"unknown delivery ordering", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Delivery = &retryv1alpha1.Delivery{Ordering: "Shuffled"}
		}), []string{"Unsupported value: \"Shuffled\""}},
		{"no delivery in flight", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Delivery = &retryv1alpha1.Delivery{MaxInFlight: ptr.To[int32](0)}
		}), []string{"maxInFlight", "greater than or equal to 1"}},
		{"batches of no record", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Delivery = &retryv1alpha1.Delivery{Batch: &retryv1alpha1.DeliveryBatch{MaxRecords: ptr.To[int32](0)}}
		}), []string{"maxRecords", "greater than or equal to 1"}},
		{"batches over 16Mi", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			q := resource.MustParse("17Mi")
			p.Spec.Delivery = &retryv1alpha1.Delivery{Batch: &retryv1alpha1.DeliveryBatch{MaxBytes: &q}}
		}), []string{"delivery.batch.maxBytes must be more than 0 and at most 16Mi"}},
		{"a batch waiting a minute", cpl(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Spec.Delivery = &retryv1alpha1.Delivery{Batch: &retryv1alpha1.DeliveryBatch{MaxWait: &metav1.Duration{Duration: time.Minute}}}
		}), []string{"delivery.batch.maxWait must be between 0s and 10s"}},
		{"policy reference without a name", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.RetryPolicyRef.Name = "" }), []string{"spec.retryPolicyRef.name"}},
		{"consumer group with a slash", cpl(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Source.ConsumerGroup = "orders/eu" }), []string{"spec.source.consumerGroup", "should match"}},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d invalid cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), c.obj())
			if err == nil {
				t.Fatalf("accepted; want rejection mentioning %q", c.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

// sampleObjects reads every manifest in config/samples (except the kustomization) as unstructured
// objects in namespace ns.
func sampleObjects(t *testing.T, ns string) map[string]*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(envtestutil.RepoRoot(), "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u.SetNamespace(ns)
		objs[filepath.Base(f)] = u
	}
	if len(objs) < 9 {
		t.Fatalf("want at least 9 samples (5 retry policies and one of each other kind), found %d", len(objs))
	}
	return objs
}

func TestEverySampleIsAccepted(t *testing.T) {
	ns := newNamespace(t)
	for name, obj := range sampleObjects(t, ns) {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Errorf("%s rejected: %v", name, err)
		}
	}
}

// TestImmutableAndOnlyGrowFieldsOnUpdate proves the transition rules through real updates.
func TestImmutableAndOnlyGrowFieldsOnUpdate(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	g := NewWithT(t)

	q := validDLQ(ns)
	q.Spec.Topic.ReplicationFactor = ptr.To[int32](1)
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	p := validPipeline(ns)
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{Partitions: ptr.To[int32](4)}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	updates := []struct {
		name   string
		obj    client.Object
		mutate func()
		want   string // "" means the update is accepted
	}{
		{"DLQ topic renamed", q, func() { q.Spec.Topic.Name = "orders.dlq.v2" }, "topic.name is immutable"},
		{"DLQ partitions shrunk", q, func() { q.Spec.Topic.Partitions = 2 }, "topic.partitions may only grow"},
		{"DLQ replication factor changed", q, func() { q.Spec.Topic.ReplicationFactor = ptr.To[int32](3) }, "topic.replicationFactor is immutable once set"},
		{"DLQ partitions grown", q, func() { q.Spec.Topic.Partitions = 6 }, ""},
		{"pipeline source topic changed", p, func() { p.Spec.Source.Topic = "payments" }, "source.topic is immutable"},
		{"pipeline consumer group set after creation", p, func() { p.Spec.Source.ConsumerGroup = "orders-v2" }, "source.consumerGroup is immutable"},
		{"pipeline source partitions shrunk", p, func() { p.Spec.Source.Create.Partitions = 1 }, "partitions may only grow"},
		{"pipeline retry partitions shrunk", p, func() { p.Spec.RetryTopics.Partitions = ptr.To[int32](2) }, "retryTopics.partitions may only grow"},
		{"pipeline source partitions grown", p, func() { p.Spec.Source.Create.Partitions = 12 }, ""},
		{"pipeline replicas changed", p, func() { p.Spec.Replicas = ptr.To[int32](3) }, ""},
	}
	for _, u := range updates {
		t.Run(u.name, func(t *testing.T) {
			g := NewWithT(t)
			key := client.ObjectKeyFromObject(u.obj)
			g.Expect(env.Client.Get(ctx, key, u.obj)).To(Succeed())
			u.mutate()
			err := env.Client.Update(ctx, u.obj)
			if u.want == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(u.want))
		})
	}

	// A consumer group set at creation cannot be changed either.
	p2 := validPipeline(ns)
	p2.Spec.Source.ConsumerGroup = "orders-v1"
	g.Expect(env.Client.Create(ctx, p2)).To(Succeed())
	p2.Spec.Source.ConsumerGroup = "orders-v2"
	err := env.Client.Update(ctx, p2)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("source.consumerGroup is immutable"))
}

// TestDefaultsAreApplied checks the defaults a user relies on without writing them.
func TestDefaultsAreApplied(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	g := NewWithT(t)

	p := validPolicy(ns)
	p.Spec.Backoff.Multiplier = ""
	p.Spec.CircuitBreaker = &retryv1alpha1.CircuitBreaker{}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Expect(p.Spec.Backoff.Multiplier).To(Equal("2"))
	g.Expect(p.Spec.Backoff.Cap).To(Equal(retryv1alpha1.CapAfterJitter))
	g.Expect(p.Spec.AttemptTimeout.Duration).To(Equal(30 * time.Second))
	g.Expect(p.Spec.Classification.DefaultAction).To(Equal(retryv1alpha1.DefaultAction("DeadLetter")))
	g.Expect(*p.Spec.CircuitBreaker).To(Equal(retryv1alpha1.CircuitBreaker{
		FailureRatioPercent: 50, MinimumRequests: 10, Window: dp("60s"), OpenDuration: dp("30s"),
		HalfOpenRequests: 5, CloseSuccessPercent: 80,
	}))

	q := validDLQ(ns)
	q.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Expect(q.Spec.DeletionPolicy).To(Equal(retryv1alpha1.DeletionPolicyRetain))
	g.Expect(*q.Spec.Alerts.MaxMessages).To(Equal(int64(500)))
	g.Expect(*q.Spec.Alerts.MaxGrowthPerMinute).To(Equal(int32(12)))
	g.Expect(q.Spec.Alerts.MaxOldestAge.Duration).To(Equal(24 * time.Hour))

	c := validPipeline(ns)
	c.Spec.Sink = &retryv1alpha1.Sink{Ref: &retryv1alpha1.SinkReference{Name: "orders"}}
	c.Spec.Delivery = &retryv1alpha1.Delivery{}
	c.Spec.Alerts = &retryv1alpha1.PipelineAlerts{}
	g.Expect(env.Client.Create(ctx, c)).To(Succeed())
	g.Expect(*c.Spec.Replicas).To(Equal(int32(1)))
	g.Expect(c.Spec.Sink.Ref.Port).To(Equal(int32(80)))
	g.Expect(c.Spec.Sink.Ref.Path).To(Equal("/"))
	g.Expect(c.Spec.Delivery.Ordering).To(Equal(retryv1alpha1.OrderingOrdered))
	g.Expect(*c.Spec.Delivery.MaxInFlight).To(Equal(int32(100)))
	g.Expect(*c.Spec.Alerts.MaxConsumerLag).To(Equal(int64(1000)))
}
