package render_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/render"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// golden compares got with testdata/<name>, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (run go test ./internal/render -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run go test ./internal/render -update and review the diff):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff shows the first differing lines of want and got.
func lineDiff(want, got string) string {
	w, g := bytes.Split([]byte(want), []byte("\n")), bytes.Split([]byte(got), []byte("\n"))
	var out bytes.Buffer
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			out.WriteString("line " + strconv.Itoa(i+1) + ":\n  want: " + string(wl) + "\n  got:  " + string(gl) + "\n")
			shown++
		}
	}
	return out.String()
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
	} {
		t.Run(tc.golden, func(t *testing.T) {
			got := renderAll(t, tc.inputs(t))
			if again := renderAll(t, tc.inputs(t)); !bytes.Equal(got, again) {
				t.Fatal("two renders of the same inputs differ")
			}
			golden(t, tc.golden, got)
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
	golden(t, "alerts-configmaps-and-dlq-rule.yaml", documents(t, pcm, drule.Object, dcm))
}
