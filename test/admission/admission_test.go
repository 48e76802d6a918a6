// Package admission tests the ValidatingAdmissionPolicy that config/ ships for ConsumerPipelines with
// a pod template: the API server of envtest enforces the policy and binding as `kubectl kustomize
// config/default` renders them, for an administrator and for users with narrower roles.
package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	optOutLabel = "retry.retryops.dev/allow-privileged-templates"
	// waitFor bounds the wait for the policy to take effect (the API server loads it asynchronously).
	waitFor = 60 * time.Second
)

// shippedPolicy renders config/default as `kubectl apply -k` would and returns its admission
// policies and bindings.
func shippedPolicy(env *envtestutil.Env) ([]*unstructured.Unstructured, error) {
	cmd := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), "kustomize", filepath.Join(envtestutil.RepoRoot(), "config", "default"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize config/default: %w\n%s", err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if u.GetAPIVersion() == "admissionregistration.k8s.io/v1" {
			objs = append(objs, u)
		}
	}
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	if kinds["ValidatingAdmissionPolicy"] != 2 || kinds["ValidatingAdmissionPolicyBinding"] != 2 {
		return nil, fmt.Errorf("config/default renders %v admission objects, want two ValidatingAdmissionPolicies (pipeline templates, DeadLetterAction requestedBy) and their bindings", kinds)
	}
	return objs, nil
}

// refusedByThePolicy waits until the administrator's dry-run create of obj is refused by a
// ValidatingAdmissionPolicy (the API server loads a policy asynchronously).
func refusedByThePolicy(ctx context.Context, t *testing.T, admin client.Client, obj client.Object, what string) {
	t.Helper()
	NewWithT(t).Eventually(func() error {
		return admin.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)
	}, waitFor, 100*time.Millisecond).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "%s after installing the policy", what)
}

// pipeline returns a ConsumerPipeline in namespace; podSpec, when not nil, is its spec.template.spec
// (as a user writes it), otherwise it has a sink.
func pipeline(namespace, name string, podSpec map[string]any) *unstructured.Unstructured {
	spec := map[string]any{
		"source":             map[string]any{"topic": "orders"},
		"retryPolicyRef":     map[string]any{"name": "orders"},
		"deadLetterQueueRef": map[string]any{"name": "orders-dlq"},
	}
	if podSpec != nil {
		spec["template"] = map[string]any{"spec": podSpec}
	} else {
		spec["sink"] = map[string]any{"uri": "http://orders.example.svc:8080/records"}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "retry.retryops.dev/v1alpha1",
		"kind":       "ConsumerPipeline",
		"metadata":   map[string]any{"namespace": namespace, "name": name},
		"spec":       spec,
	}}
	return u
}

// container is a container named name, with securityContext sc when not nil.
func container(name string, sc map[string]any) map[string]any {
	c := map[string]any{"name": name, "image": "ghcr.io/example/consumer:1.0.0"}
	if sc != nil {
		c["securityContext"] = sc
	}
	return c
}

// largePod is a big template that breaks no rule: the policy's cost stays within the API server's
// budget for it.
func largePod() map[string]any {
	baseline := []any{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	var containers, inits, volumes []any
	for i := range 64 {
		sc := map[string]any{"privileged": false, "allowPrivilegeEscalation": false, "capabilities": map[string]any{"add": baseline, "drop": []any{"NET_RAW"}}}
		containers = append(containers, container("consumer-"+strconv.Itoa(i), sc))
		inits = append(inits, container("setup-"+strconv.Itoa(i), sc))
	}
	for i := range 256 {
		volumes = append(volumes, map[string]any{"name": "v" + strconv.Itoa(i), "emptyDir": map[string]any{}})
	}
	return map[string]any{"containers": containers, "initContainers": inits, "volumes": volumes, "hostNetwork": false, "hostPID": false, "hostIPC": false}
}

func plainPod() map[string]any {
	return map[string]any{"containers": []any{container("consumer", nil)}}
}

func privilegedPod() map[string]any {
	return map[string]any{"containers": []any{container("consumer", map[string]any{"privileged": true})}}
}

// create creates obj with c and returns the error.
func create(ctx context.Context, c client.Client, obj *unstructured.Unstructured) error {
	return c.Create(ctx, obj.DeepCopy())
}

// expectDenied fails unless err is the API server's refusal of the request by the template policy
// with a message holding every one of want.
func expectDenied(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("created, want the template policy to deny it (%q)", want)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("error %v (reason %s), want a denial by the template policy", err, apierrors.ReasonForError(err))
	}
	msg := err.Error()
	t.Logf("denied: %s", msg)
	if !strings.Contains(msg, "ValidatingAdmissionPolicy") {
		t.Fatalf("error %q is not from the ValidatingAdmissionPolicy", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("denial %q does not say %q", msg, w)
		}
	}
}

func expectAllowed(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
}

// namespace creates a namespace with labels.
func namespace(ctx context.Context, t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
}

// user adds an envtest user (a client certificate) bound in namespace to a Role with rules and
// returns a client acting as that user.
func user(ctx context.Context, t *testing.T, env *envtestutil.Env, namespace, name string, rules []rbacv1.PolicyRule) client.Client {
	t.Helper()
	admin := env.Client
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := admin.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	u, err := env.Environment.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(u.Config(), client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect asynchronously too: wait until the user may create a pipeline in sink mode.
	probe := pipeline(namespace, name+"-rbac-probe", nil)
	NewWithT(t).Eventually(func() error {
		return c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
	}, waitFor, 100*time.Millisecond).Should(Succeed(), "user %s may create a ConsumerPipeline", name)
	return c
}

var (
	pipelineRule   = rbacv1.PolicyRule{APIGroups: []string{"retry.retryops.dev"}, Resources: []string{"consumerpipelines"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
	deploymentRule = rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
)

func TestTemplatePolicy(t *testing.T) {
	env := policyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin := env.Client

	namespace(ctx, t, admin, "tenant", nil)
	namespace(ctx, t, admin, "trusted", map[string]string{optOutLabel: "true"})
	refusedByThePolicy(ctx, t, admin, pipeline("tenant", "probe", privilegedPod()), "a privileged template is refused")

	t.Run("administrator", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			pod  map[string]any
			want []string // nil: allowed
		}{
			{"privileged", privilegedPod(), []string{"privileged containers (consumer)", "securityContext.privileged", optOutLabel + "=true"}},
			{"privileged-init", map[string]any{
				"initContainers": []any{container("setup", map[string]any{"privileged": true})},
				"containers":     []any{container("consumer", nil)},
			}, []string{"privileged containers (setup)"}},
			{"escalation", map[string]any{"containers": []any{container("consumer", map[string]any{"allowPrivilegeEscalation": true})}}, []string{"allowPrivilegeEscalation", optOutLabel}},
			{"sys-admin", map[string]any{"containers": []any{container("consumer", map[string]any{
				"capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE", "SYS_ADMIN"}},
			})}}, []string{"consumer adds SYS_ADMIN", "beyond Pod Security baseline"}},
			{"baseline-capability", map[string]any{"containers": []any{container("consumer", map[string]any{
				"capabilities": map[string]any{"add": []any{"NET_BIND_SERVICE"}},
			})}}, nil},
			{"host-network", map[string]any{"hostNetwork": true, "containers": []any{container("consumer", nil)}}, []string{"node's namespaces (hostNetwork true)", optOutLabel}},
			{"host-pid-ipc", map[string]any{"hostPID": true, "hostIPC": true, "containers": []any{container("consumer", nil)}}, []string{"hostPID, hostIPC"}},
			{"host-network-false", map[string]any{"hostNetwork": false, "containers": []any{container("consumer", nil)}}, nil},
			{"host-path", map[string]any{
				"containers": []any{container("consumer", nil)},
				"volumes":    []any{map[string]any{"name": "node-root", "hostPath": map[string]any{"path": "/"}}},
			}, []string{"hostPath volumes node-root", optOutLabel}},
			{"large", largePod(), nil},
			{"restricted", map[string]any{
				"containers": []any{container("consumer", map[string]any{"privileged": false, "allowPrivilegeEscalation": false})},
				"volumes":    []any{map[string]any{"name": "scratch", "emptyDir": map[string]any{}}},
			}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := create(ctx, admin, pipeline("tenant", tc.name, tc.pod))
				if tc.want == nil {
					expectAllowed(t, err)
				} else {
					expectDenied(t, err, tc.want...)
				}
				// The namespace that opts out takes all of them.
				expectAllowed(t, create(ctx, admin, pipeline("trusted", tc.name, tc.pod)))
			})
		}
		t.Run("sink", func(t *testing.T) {
			expectAllowed(t, create(ctx, admin, pipeline("tenant", "sink", nil)))
		})
	})

	t.Run("update", func(t *testing.T) {
		p := pipeline("tenant", "updated", plainPod())
		expectAllowed(t, create(ctx, admin, p))
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(p.GroupVersionKind())
		if err := admin.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		bad := got.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, map[string]any{"containers": []any{container("consumer", map[string]any{"privileged": true})}}, "spec", "template", "spec"); err != nil {
			t.Fatal(err)
		}
		expectDenied(t, admin.Update(ctx, bad), "privileged containers (consumer)")
		// An update that leaves the template alone is not checked again (finalizers, labels).
		got.SetLabels(map[string]string{"team": "orders"})
		expectAllowed(t, admin.Update(ctx, got))
	})

	t.Run("pipelines-only-user", func(t *testing.T) {
		c := user(ctx, t, env, "tenant", "pipelines-only", []rbacv1.PolicyRule{pipelineRule})
		err := create(ctx, c, pipeline("tenant", "pipelines-only-plain", plainPod()))
		expectDenied(t, err, "pipelines-only may not create Deployments in namespace tenant", "spec.sink")
		// Even in the namespace that opts out of the pod checks.
		c2 := user(ctx, t, env, "trusted", "trusted-pipelines-only", []rbacv1.PolicyRule{pipelineRule})
		expectDenied(t, create(ctx, c2, pipeline("trusted", "pipelines-only-plain", plainPod())), "may not create Deployments in namespace trusted")
		// Sink mode runs only the operator's dispatcher: allowed.
		expectAllowed(t, create(ctx, c, pipeline("tenant", "pipelines-only-sink", nil)))
	})

	t.Run("deployments-user", func(t *testing.T) {
		c := user(ctx, t, env, "tenant", "deployer", []rbacv1.PolicyRule{pipelineRule, deploymentRule})
		expectAllowed(t, create(ctx, c, pipeline("tenant", "deployer-plain", plainPod())))
		expectAllowed(t, create(ctx, c, pipeline("tenant", "deployer-sink", nil)))
		// The right to create Deployments is not a right to privileged pods.
		expectDenied(t, create(ctx, c, pipeline("tenant", "deployer-privileged", privilegedPod())), "privileged containers (consumer)")
	})
}
