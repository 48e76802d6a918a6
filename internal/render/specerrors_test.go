package render_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/retry"
)

func TestSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*render.Inputs)
	}{
		{"no bootstrap servers anywhere", func(in *render.Inputs) { in.DefaultBootstrapServers = nil }},
		{"both sink and template", func(in *render.Inputs) {
			in.Pipeline.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		}},
		{"neither sink nor template", func(in *render.Inputs) { in.Pipeline.Spec.Sink = nil }},
		{"both sink.uri and sink.ref", func(in *render.Inputs) { in.Pipeline.Spec.Sink.Ref = &retryv1alpha1.SinkReference{Name: "svc"} }},
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
	plain := func(allow retryv1alpha1.PlaintextPassword) *retryv1alpha1.KafkaSASL {
		return &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "u"}, PlaintextPassword: allow}
	}
	for _, tc := range []struct {
		name   string
		change func(*render.Inputs)
		field  string // "": no error
		text   string
	}{
		{"a DLQ with its own credentials on the default cluster", func(in *render.Inputs) {
			in.DLQ.Spec.Kafka = &retryv1alpha1.KafkaConnection{SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "u"}}}
		}, "DeadLetterQueue chatbot-dlq spec.kafka", "tls and sasl apply only with bootstrapServers"},
		{"a pipeline with only tls", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{TLS: &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "ca"}}}
		}, "spec.kafka", "the operator's default connection"},
		{"PLAIN without TLS", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain("")}
		}, "spec.kafka.sasl", "SASL PLAIN without TLS"},
		{"PLAIN without TLS on the DLQ, refused explicitly", func(in *render.Inputs) {
			in.DLQ.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain(retryv1alpha1.PlaintextPasswordRefuse)}
		}, "DeadLetterQueue chatbot-dlq spec.kafka.sasl", "SASL PLAIN without TLS"},
		{"PLAIN without TLS, allowed", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}, SASL: plain(retryv1alpha1.PlaintextPasswordAllow)}
		}, "", ""},
		{"PLAIN over TLS", func(in *render.Inputs) {
			in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}, TLS: &retryv1alpha1.KafkaTLS{}, SASL: plain("")}
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
	p := &retryv1alpha1.ConsumerPipeline{}
	p.Namespace = "shop"
	for _, tc := range []struct {
		sink *retryv1alpha1.Sink
		want string
	}{
		{&retryv1alpha1.Sink{URI: "https://api.example.com/hook"}, "https://api.example.com/hook"},
		{&retryv1alpha1.Sink{Ref: &retryv1alpha1.SinkReference{Name: "orders-api", Port: 8080, Path: "/v1/orders"}}, "http://orders-api.shop.svc:8080/v1/orders"},
		{&retryv1alpha1.Sink{Ref: &retryv1alpha1.SinkReference{Name: "orders-api"}}, "http://orders-api.shop.svc:80/"},
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
		pipeline *retryv1alpha1.KafkaConnection
		dlq      *retryv1alpha1.KafkaConnection
		want     []string // nil: the DLQ shares the source connection
	}{
		{"both on the default cluster share it", nil, nil, nil},
		{"an identical explicit connection is shared", &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, nil},
		{"a pipeline on its own cluster leaves the DLQ on the default one", &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"a:9092"}}, nil, []string{"kafka.kafka.svc:9092"}},
		{"a DLQ with its own credentials on the default cluster's servers (named) is separate", nil,
			&retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka.kafka.svc:9092"},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "u"}}}, []string{"kafka.kafka.svc:9092"}},
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
	in.Policy.Spec.Classification = &retryv1alpha1.Classification{DefaultAction: "Retry", Rules: []retryv1alpha1.ClassificationRule{
		{Name: "broken", Action: retryv1alpha1.ActionRetry, MessagePatterns: []string{"(unclosed"}}}}
	if _, err := render.Config(in); err == nil {
		t.Fatal("a policy whose pattern does not compile rendered without Inputs.Compiled")
	}
	in.Compiled = comp
	if _, err := render.Config(in); err != nil {
		t.Fatalf("with Inputs.Compiled the policy is not compiled again: %v", err)
	}
}
