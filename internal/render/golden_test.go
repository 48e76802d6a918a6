package render_test

import (
	"bytes"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/testutil/golden"
)

// assertGolden compares got with testdata/<name>, or rewrites the file with -update.
func assertGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Assert(t, name, got, "go test ./internal/render")
}

// documents joins objects as a multi-document YAML stream.
func documents(t *testing.T, objs ...any) []byte {
	t.Helper()
	var out bytes.Buffer
	for i, o := range objs {
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("marshalling: %v", err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(data)
	}
	return out.Bytes()
}

// renderAll renders a pipeline's ConfigMap, Deployment, PrometheusRule and the consumers' access
// objects (ServiceAccount, when the pipeline has its own, circuit ConfigMap, Role, RoleBinding).
func renderAll(t *testing.T, in *render.Inputs) []byte {
	t.Helper()
	cm, err := render.ConfigMap(in)
	if err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	dep, err := render.Deployment(in, render.ConfigHash(cm))
	if err != nil {
		t.Fatalf("Deployment: %v", err)
	}
	rule, err := render.PrometheusRule(in)
	if err != nil {
		t.Fatalf("PrometheusRule: %v", err)
	}
	objs := []any{cm, dep, rule.Object}
	if sa := render.ServiceAccount(in.Pipeline); sa != nil {
		objs = append(objs, sa)
	}
	p := in.Pipeline
	return documents(t, append(objs, render.CircuitConfigMap(p), render.CircuitRole(p), render.CircuitRoleBinding(p))...)
}

func TestGoldenPipelines(t *testing.T) {
	for _, tc := range []struct {
		golden string
		inputs func(*testing.T) *render.Inputs
	}{
		{"sink-uri.yaml", sinkURIInputs},
		{"sink-service-ref-secrets.yaml", sinkRefSecretsInputs},
		{"template-minimal.yaml", templateMinimalInputs},
		{"template-user-settings.yaml", templateUserSettingsInputs},
		{"sink-default-connection-secured.yaml", securedDefaultInputs},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got := renderAll(t, tc.inputs(t))
			if again := renderAll(t, tc.inputs(t)); !bytes.Equal(got, again) {
				t.Fatal("two renders of the same inputs differ")
			}
			assertGolden(t, tc.golden, got)
		})
	}
}

func TestGoldenAlertConfigMaps(t *testing.T) {
	in := sinkRefSecretsInputs(t)
	pcm, err := render.AlertConfigMap(in)
	if err != nil {
		t.Fatal(err)
	}
	din := &render.DeadLetterQueueInputs{DLQ: in.DLQ, RuleLabels: in.RuleLabels}
	drule, err := render.DeadLetterQueuePrometheusRule(din)
	if err != nil {
		t.Fatal(err)
	}
	dcm, err := render.DeadLetterQueueAlertConfigMap(din)
	if err != nil {
		t.Fatal(err)
	}
	assertGolden(t, "alerts-configmaps-and-dlq-rule.yaml", documents(t, pcm, drule.Object, dcm))
}
