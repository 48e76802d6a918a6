package controllers_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// apiRequest is one request a manager sent to the API server, as RBAC sees it.
type apiRequest struct {
	Verb, Resource, Namespace, LabelSelector string
}

// requestLog records the requests sent through a rest.Config it wraps.
type requestLog struct {
	mu   sync.Mutex
	reqs []apiRequest
	// forbidden are the requests the API server answered 403.
	forbidden []apiRequest
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		req, ok := classifyRequest(r)
		if ok {
			l.mu.Lock()
			l.reqs = append(l.reqs, req)
			l.mu.Unlock()
		}
		resp, err := rt.RoundTrip(r)
		if ok && err == nil && resp.StatusCode == http.StatusForbidden {
			l.mu.Lock()
			l.forbidden = append(l.forbidden, req)
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *requestLog) denied() []apiRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.forbidden)
}

func (l *requestLog) all() []apiRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// classifyRequest names a resource request's RBAC verb and resource ("group/resource[/sub]", the
// core group empty); discovery requests are not resource requests.
func classifyRequest(r *http.Request) (apiRequest, bool) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return apiRequest{}, false
	}
	req := apiRequest{LabelSelector: r.URL.Query().Get("labelSelector")}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		req.Namespace, parts = parts[1], parts[2:]
	}
	resource, name := parts[0], ""
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		resource += "/" + parts[2]
	}
	req.Resource = group + "/" + resource
	switch r.Method {
	case http.MethodGet:
		switch {
		case name != "":
			req.Verb = "get"
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			req.Verb = "watch"
		default:
			req.Verb = "list"
		}
	case http.MethodPost:
		req.Verb = "create"
	case http.MethodPut:
		req.Verb = "update"
	case http.MethodPatch:
		req.Verb = "patch"
	case http.MethodDelete:
		req.Verb = "delete"
	default:
		req.Verb = strings.ToLower(r.Method)
	}
	return req, true
}

// TestTheManagerCachesNoSecretAndOnlyItsOwnChildren runs a manager restricted to one namespace
// (--watch-namespaces) with the cache options cmd/manager uses, recording every request it sends,
// through a DeadLetterQueue whose Kafka credentials are in a Secret and a pipeline with its children:
//   - Secrets are only ever read with a GET, never listed or watched, and the manager's cache has no
//     Secret to list (it refuses, having no informer for them);
//   - the owned kinds are listed and watched with the operator's label only: a ConfigMap without it,
//     in the same namespace, is not in the cache;
//   - nothing is listed or watched outside the namespace (but cluster-scoped CRDs);
//   - every request is one the ClusterRole (config/rbac/role.yaml) grants;
//   - the manager acts as a ServiceAccount bound as config/watch-namespaces binds it (the ClusterRole
//     by RoleBindings in the watched namespace and its own, and cluster-wide only the CRD reads of
//     config/watch-namespaces/cluster_reads.yaml), and the API server forbids none of its requests.
func TestTheManagerCachesNoSecretAndOnlyItsOwnChildren(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	log := &requestLog{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: bindAsWatchNamespacesDoes(t, ns)}
	cfg.Wrap(log.wrap)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     envtestutil.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      controllers.CacheOptions([]string{ns}),
		Logger:     logr.Discard(),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	g.Expect(controllers.SetupWithManager(mctx, mgr, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		StatusRefreshInterval:   resyncInterval,
		DefaultBootstrapServers: broker.ListenAddrs(),
		DeletionTimeout:         deletionTimeout,
		WatchNamespaces:         []string{ns},
	})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// The suite manager leaves objects with benchmarkLabel alone: only this test's manager acts.
	mine := map[string]string{benchmarkLabel: "least-privilege"}
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kafka-user"},
			StringData: map[string]string{"username": "tenant", "password": "s3cret"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-ours"}, Data: map[string]string{"k": "v"}},
	}
	rp := backoffPolicy(ns, "policy", 2, time.Second, 2*time.Second)
	dlq := newDLQ(ns, "dlq", ns+".dlq")
	credentialed := newDLQ(ns, "credentialed", ns+".credentialed")
	credentialed.Spec.Kafka = &retryv1alpha1.KafkaConnection{
		BootstrapServers: broker.ListenAddrs(),
		SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512,
			SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}},
	}
	p := newPipeline(ns, "pipeline", ns+".source", "policy", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	for _, o := range []client.Object{rp, dlq, credentialed, p} {
		o.SetLabels(mine)
		objs = append(objs, o)
	}
	for _, o := range objs {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).ShouldNot(BeNil())
	g.Eventually(dlqReady(credentialed), wait, poll).ShouldNot(BeNil())
	g.Eventually(func() []apiRequest { return requestsFor(log.all(), "/secrets") }, wait, poll).
		Should(ContainElement(HaveField("Verb", "get")), "the Secret was read")

	// What the cache holds: no Secret at all, no ConfigMap without the operator's label.
	err = mgr.GetCache().List(ctx, &corev1.SecretList{})
	var notCached *cache.ErrResourceNotCached
	g.Expect(errors.As(err, &notCached)).To(BeTrue(), "listing Secrets from the cache: %v", err)
	g.Expect(apierrors.IsNotFound(mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: ns, Name: "not-ours"}, &corev1.ConfigMap{}))).To(BeTrue())
	g.Expect(mgr.GetCache().Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(p)}, &corev1.ConfigMap{})).To(Succeed())

	reqs := log.all()
	for _, r := range requestsFor(reqs, "/secrets") {
		g.Expect(r.Verb).To(Equal("get"), "a request on Secrets: %+v", r)
	}
	managed := render.LabelManagedBy + "=" + render.LabelManagedByValue
	for _, r := range reqs {
		if r.Verb != "list" && r.Verb != "watch" {
			continue
		}
		// The leader's sweep of the topic ledger: one uncached list of the ledger's records in the
		// manager's own namespace (controllers/ledger_sweep.go), nothing wider.
		if r == (apiRequest{Verb: "list", Resource: "/configmaps", Namespace: controllers.DefaultOperatorNamespace, LabelSelector: kafkaspec.LedgerLabel}) {
			continue
		}
		if r.Resource != "apiextensions.k8s.io/customresourcedefinitions" {
			g.Expect(r.Namespace).To(Equal(ns), "listed outside the watched namespace: %+v", r)
		}
		switch r.Resource {
		case "/configmaps", "apps/deployments", "/serviceaccounts", "rbac.authorization.k8s.io/roles", "rbac.authorization.k8s.io/rolebindings":
			g.Expect(r.LabelSelector).To(Equal(managed), "an owned kind cached beyond the operator's label: %+v", r)
		}
	}
	granted := managerRoleVerbs(t)
	for _, r := range reqs {
		g.Expect(granted[r.Resource]).To(ContainElement(r.Verb), "a request the ClusterRole does not grant: %+v", r)
	}
	g.Expect(log.denied()).To(BeEmpty(), "requests the API server forbade to a manager bound as config/watch-namespaces binds it")
}

// bindAsWatchNamespacesDoes binds a user for the manager watching ns as config/watch-namespaces
// binds the manager's ServiceAccount, and returns the user's name: a copy of the manager's
// ClusterRole bound by RoleBindings in ns and in the manager's namespace, and a copy of the overlay's
// cluster_reads.yaml ClusterRole bound cluster-wide. It waits until the authorizer has seen them.
func bindAsWatchNamespacesDoes(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	user := "system:serviceaccount:" + ns + ":retry-operator-namespaced"
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	role := managerRole(t)
	role.Name = ns + "-namespaced-manager-role"
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "watch-namespaces", "cluster_reads.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reads := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal([]byte(strings.Split(string(data), "\n---\n")[0]), reads); err != nil || len(reads.Rules) == 0 {
		t.Fatalf("config/watch-namespaces/cluster_reads.yaml: %v, %d rules", err, len(reads.Rules))
	}
	reads.ObjectMeta = metav1.ObjectMeta{Name: ns + "-cluster-reads"}
	objs := []client.Object{role, reads,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: reads.Name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reads.Name}}}
	for _, in := range []string{ns, controllers.DefaultOperatorNamespace} {
		objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: in, Name: ns + "-manager"}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	c := impersonating(t, user)
	NewWithT(t).Eventually(func() error {
		return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace(controllers.DefaultOperatorNamespace), client.Limit(1))
	}, wait, poll).Should(Succeed(), "the bindings reach the authorizer")
	return user
}

// requestsFor are the requests on resource.
func requestsFor(reqs []apiRequest, resource string) []apiRequest {
	var out []apiRequest
	for _, r := range reqs {
		if r.Resource == resource {
			out = append(out, r)
		}
	}
	return out
}
