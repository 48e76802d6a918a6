package render_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
)

// TestTheConsumersMayWriteTheirCircuitReportOnly: the Role grants get and patch on the pipeline's
// circuit ConfigMap, named, and nothing else; it is bound to the ServiceAccount the pods run as.
func TestTheConsumersMayWriteTheirCircuitReportOnly(t *testing.T) {
	in := sinkURIInputs(t)
	p := in.Pipeline
	role := render.CircuitRole(p)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"chat-dispatcher-circuit"}, Verbs: []string{"get", "patch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("role rules %+v, want %+v", role.Rules, want)
	}
	if role.Namespace != "shop" || role.Name != "chat-dispatcher" {
		t.Errorf("role %s/%s, want shop/chat-dispatcher", role.Namespace, role.Name)
	}
	rb := render.CircuitRoleBinding(p)
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "chat-dispatcher"}) {
		t.Errorf("roleRef %+v", rb.RoleRef)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "chat-dispatcher", Namespace: "shop"}}; !reflect.DeepEqual(rb.Subjects, want) {
		t.Errorf("subjects %+v, want %+v", rb.Subjects, want)
	}
	sa := render.ServiceAccount(p)
	if sa == nil || sa.Name != "chat-dispatcher" || sa.Namespace != "shop" {
		t.Fatalf("service account %+v, want shop/chat-dispatcher", sa)
	}
	cm := render.CircuitConfigMap(p)
	if cm.Name != "chat-dispatcher-circuit" || cm.Data != nil || cm.Labels[render.LabelPipeline] != "chat" {
		t.Errorf("circuit ConfigMap %+v: want chat-dispatcher-circuit with the pipeline label and no data (the consumers own it)", cm)
	}

	// The config tells the dispatcher where to report, with the operator's interval.
	in.CircuitReportInterval = 7 * time.Second
	cfg, err := render.Config(in)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.CircuitReport; r == nil || r.ConfigMap != "chat-dispatcher-circuit" || r.Interval == nil || r.Interval.Duration != 7*time.Second {
		t.Errorf("circuitReport %+v, want chat-dispatcher-circuit every 7s", r)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the rendered config does not validate: %v", err)
	}
}

// TestNoCircuitBreakerStillReports: without a breaker in the policy the consumers still report Kafka
// refusing them: circuitReport in the config, a token and POD_NAME in the pod.
func TestNoCircuitBreakerStillReports(t *testing.T) {
	in := sinkURIInputs(t)
	in.Policy.Spec.CircuitBreaker = nil
	cfg, err := render.Config(in)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.CircuitReport; r == nil || r.ConfigMap != "chat-dispatcher-circuit" {
		t.Errorf("circuitReport %+v without a circuit breaker, want chat-dispatcher-circuit", r)
	}
	pod := mustDeployment(t, in).Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Error("the dispatcher gets no service account token to report with")
	}
	found := false
	for _, e := range pod.Containers[0].Env {
		found = found || e.Name == config.EnvPodName
	}
	if !found {
		t.Errorf("env lacks %s without a circuit breaker", config.EnvPodName)
	}
}

// TestTemplateModeReportsAsTheTemplatesServiceAccount: a template naming its own ServiceAccount
// keeps it; the Role is bound to it and no ServiceAccount is rendered. Without one, the pods run as
// the pipeline's. Either way every container learns its pod's name.
func TestTemplateModeReportsAsTheTemplatesServiceAccount(t *testing.T) {
	own := templateUserSettingsInputs(t)
	if own.Pipeline.Spec.Template.Spec.ServiceAccountName != "embedder" {
		t.Fatal("the fixture should name its ServiceAccount")
	}
	own.Policy = chatbotPolicy()
	own.Tiers = tiers(t, own.Pipeline, own.Policy)
	if sa := render.ServiceAccount(own.Pipeline); sa != nil {
		t.Errorf("rendered ServiceAccount %s although the template names its own", sa.Name)
	}
	if got := render.CircuitRoleBinding(own.Pipeline).Subjects[0].Name; got != "embedder" {
		t.Errorf("role bound to %q, want the template's embedder", got)
	}
	pod := mustDeployment(t, own).Spec.Template.Spec
	if pod.ServiceAccountName != "embedder" {
		t.Errorf("pods run as %q, want embedder", pod.ServiceAccountName)
	}
	for _, c := range pod.Containers {
		if !hasPodNameEnv(c) {
			t.Errorf("container %s lacks %s", c.Name, config.EnvPodName)
		}
	}

	minimal := templateMinimalInputs(t)
	minimal.Policy = chatbotPolicy()
	minimal.Tiers = tiers(t, minimal.Pipeline, minimal.Policy)
	if got, want := mustDeployment(t, minimal).Spec.Template.Spec.ServiceAccountName, render.ServiceAccountName(minimal.Pipeline); got != want {
		t.Errorf("pods run as %q, want the pipeline's %q", got, want)
	}
	if render.ServiceAccount(minimal.Pipeline) == nil {
		t.Error("no ServiceAccount rendered for a template without one")
	}
}

func hasPodNameEnv(c corev1.Container) bool {
	for _, e := range c.Env {
		if e.Name == config.EnvPodName && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			return true
		}
	}
	return false
}
