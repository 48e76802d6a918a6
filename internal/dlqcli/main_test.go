package dlqcli

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

// The control plane is shared by the tests that need one and started by the first.
var shared envtestutil.Shared

func TestMain(m *testing.M) { shared.Main(m) }

func startEnv(t *testing.T) *envtestutil.Env { return shared.Env(t) }

// testNow is the plugin's clock in tests that print ages.
var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// result is one run of the plugin.
type result struct {
	stdout, stderr string
	code           int
}

// runPlugin runs the command tree in process as kubectl dlq would, with kubeconfig, the clock at
// testNow and stderr taken for a terminal when terminal is true.
func runPlugin(t *testing.T, kubeconfig string, terminal bool, args ...string) result {
	t.Helper()
	return <-startPlugin(t, kubeconfig, testNow, terminal, &syncBuffer{}, args...)
}

// startPlugin runs the plugin in the background with the clock at now, stderr into errOut.
func startPlugin(t *testing.T, kubeconfig string, now time.Time, terminal bool, errOut *syncBuffer, args ...string) <-chan result {
	t.Helper()
	var out bytes.Buffer
	o := newOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: errOut})
	o.clock = clocktesting.NewFakePassiveClock(now)
	o.terminal = func(io.Writer) bool { return terminal }
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		code := execute(ctx, o, append([]string{"--kubeconfig", kubeconfig}, args...))
		done <- result{stdout: out.String(), stderr: errOut.String(), code: code}
	}()
	return done
}

// syncBuffer is a buffer a running plugin writes while the test reads it.
type syncBuffer = syncbuf.Buffer

// namespaceWithQueue creates a namespace holding a DeadLetterQueue named queue.
func namespaceWithQueue(t *testing.T, e *envtestutil.Env, ns, queue string) *retryv1alpha1.DeadLetterQueue {
	t.Helper()
	ctx := context.Background()
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	q := &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: queue},
		Spec:       retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: retryv1alpha1.TopicName(ns + "." + queue)}},
	}
	if err := e.Client.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	return q
}

// userKubeconfig adds an envtest user bound in ns to a Role with rules (none: no rights at all) and
// returns the path of its kubeconfig.
func userKubeconfig(t *testing.T, e *envtestutil.Env, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	if len(rules) > 0 {
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
		}
		for _, obj := range []client.Object{role, rb} {
			if err := e.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	// RBAC takes effect asynchronously: wait until the authorizer grants the first rule.
	if len(rules) > 0 {
		gomega.NewWithT(t).Eventually(func() (bool, error) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: name,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: rules[0].Verbs[0], Group: rules[0].APIGroups[0], Resource: rules[0].Resources[0]}}}
			err := e.Client.Create(ctx, sar)
			return sar.Status.Allowed, err
		}, 30*time.Second, 50*time.Millisecond).Should(gomega.BeTrue())
	}
	u, err := e.Environment.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/kubeconfig"
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
