package extmetrics_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	emclient "k8s.io/metrics/pkg/client/external_metrics"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/extmetrics"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

const ns = "shop"

// TestExternalMetricsAPI serves the metric from this process as the manager does (its cache, the
// deadletters API server, the self-managed certificate), behind envtest's kube-apiserver
// configured for aggregation and registered as make dev registers it, and reads it through the
// aggregator with the HorizontalPodAutoscaler controller's own client.
func TestExternalMetricsAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g := NewWithT(t)
	env, err := envtestutil.StartAggregated()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()
	c := env.Client
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	for name, lag := range map[string]*int64{"orders": ptr.To[int64](1234), "payments": ptr.To[int64](56), "fresh": nil} {
		p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source: retryv1alpha1.PipelineSource{Topic: "orders"}, RetryPolicyRef: retryv1alpha1.LocalObjectReference{Name: "policy"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"}, Sink: &retryv1alpha1.Sink{URI: "http://sink.shop.svc/orders"}}}
		g.Expect(c.Create(ctx, p)).To(Succeed())
		if lag != nil {
			p.Status.DueLag = lag
			g.Expect(c.Status().Update(ctx, p)).To(Succeed())
		}
	}

	// The route, as make dev makes it: both APIServices before the server starts, so that its
	// certificate manager writes the CA into both.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := int32(lis.Addr().(*net.TCPAddr).Port)
	g.Expect(devenv.RegisterDeadLettersAPI(ctx, c, port)).To(Succeed())
	g.Expect(devenv.RegisterExternalMetricsAPI(ctx, c, port)).To(Succeed())

	// The manager's cache as cmd/manager configures it (no informer started behind its back): the
	// pipelines' informer exists on every replica.
	mgr, err := manager.New(env.Config, manager.Options{Scheme: envtestutil.Scheme(), Cache: controllers.CacheOptions(nil),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = mgr.GetCache().GetInformer(ctx, &retryv1alpha1.ConsumerPipeline{})
	g.Expect(err).NotTo(HaveOccurred())
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	g.Expect(mgr.Add(dlqapi.NewServer(dlqapi.Options{
		Listener: lis,
		Config:   env.Config,
		Certs: &dlqapi.CertManager{Client: c, Namespace: envtestutil.OperatorNamespace, SecretName: "retry-operator-deadletters-api-tls",
			Service: devenv.DeadLettersAPIService},
		Storage: &dlqapi.Storage{Queues: &dlqapi.ClientQueues{Reader: c, Secrets: c, Ledger: &kafkaspec.Ledger{Reader: c, Namespace: envtestutil.OperatorNamespace}}},
		Groups:  []dlqapi.Group{&extmetrics.Group{Storage: &extmetrics.Storage{Reader: mgr.GetClient(), Clock: clocktesting.NewFakePassiveClock(now)}}},
	}))).To(Succeed())
	mctx, stop := context.WithCancel(logf.IntoContext(ctx, testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { stop(); <-done }()
	for _, name := range []string{dlqapi.APIServiceName, dlqapi.ExternalMetricsAPIServiceName} {
		waitAvailable(ctx, t, c, name)
	}

	orders := labels.SelectorFromSet(render.ExternalMetricLabels("orders"))
	// Available says the aggregator's probe reached the server; its proxy for the group can still
	// answer 503 for a moment after: wait until a read gets through.
	NewWithT(t).Eventually(ctx, func() bool {
		_, err := emclient.NewForConfigOrDie(env.Config).NamespacedMetrics(ns).List(extmetrics.Metric, orders)
		return !apierrors.IsServiceUnavailable(err)
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(BeTrue(), "the aggregator routes the external metrics API")
	t.Run("the HPA controller's client reads a pipeline's due lag through the aggregator", func(t *testing.T) {
		g := NewWithT(t)
		list, err := emclient.NewForConfigOrDie(env.Config).NamespacedMetrics(ns).List(extmetrics.Metric, orders)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Items).To(HaveLen(1))
		v := list.Items[0]
		t.Logf("%s%v = %s at %s", v.MetricName, v.MetricLabels, v.Value.String(), v.Timestamp.UTC().Format(time.RFC3339))
		g.Expect(v.MetricName).To(Equal(extmetrics.Metric))
		g.Expect(v.MetricLabels).To(Equal(map[string]string{"consumerpipeline": "orders"}))
		g.Expect(v.Value.Value()).To(Equal(int64(1234)))
		g.Expect(v.Timestamp.UTC()).To(Equal(now))
	})

	t.Run("a change of status.dueLag is served from the cache", func(t *testing.T) {
		p := &retryv1alpha1.ConsumerPipeline{}
		NewWithT(t).Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders"}, p)).To(Succeed())
		p.Status.DueLag = ptr.To[int64](4321)
		NewWithT(t).Expect(c.Status().Update(ctx, p)).To(Succeed())
		NewWithT(t).Eventually(ctx, func() (int64, error) {
			list, err := emclient.NewForConfigOrDie(env.Config).NamespacedMetrics(ns).List(extmetrics.Metric, orders)
			if err != nil {
				return 0, err
			}
			if len(list.Items) != 1 {
				return 0, fmt.Errorf("%d items", len(list.Items))
			}
			return list.Items[0].Value.Value(), nil
		}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Equal(int64(4321)))
	})

	// hpa is bound to the HPA controller's own ClusterRole, as kube-controller-manager's service
	// account is in a cluster; nobody has no role.
	hpa := userConfig(t, env, "hpa")
	nobody := userConfig(t, env, "nobody")
	g.Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "hpa-as-the-controller"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:controller:horizontal-pod-autoscaler"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "hpa"}}})).To(Succeed())

	t.Run("a user the HPA controller's role allows lists the selected pipelines; one without a due lag is absent", func(t *testing.T) {
		g := NewWithT(t)
		values := func(sel labels.Selector) []string {
			var list *emv1beta1.ExternalMetricValueList
			g.Eventually(ctx, func() error { // until RBAC sees the binding
				var err error
				list, err = emclient.NewForConfigOrDie(hpa).NamespacedMetrics(ns).List(extmetrics.Metric, sel)
				return err
			}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
			var out []string
			for _, v := range list.Items {
				out = append(out, v.MetricLabels["consumerpipeline"]+"="+v.Value.String())
			}
			return out
		}
		g.Expect(values(labels.SelectorFromSet(render.ExternalMetricLabels("payments")))).To(Equal([]string{"payments=56"}))
		g.Expect(values(labels.Everything())).To(Equal([]string{"orders=4321", "payments=56"}))
		g.Expect(values(labels.SelectorFromSet(render.ExternalMetricLabels("fresh")))).To(BeEmpty())
	})

	t.Run("a user without RBAC is forbidden", func(t *testing.T) {
		_, err := emclient.NewForConfigOrDie(nobody).NamespacedMetrics(ns).List(extmetrics.Metric, orders)
		t.Logf("%v", err)
		NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	})

	raw := kubernetes.NewForConfigOrDie(env.Config).CoreV1().RESTClient()
	path := "/apis/" + emv1beta1.GroupName + "/v1beta1/namespaces/" + ns + "/"
	t.Run("another metric is NotFound, saying which one is served", func(t *testing.T) {
		g := NewWithT(t)
		_, err := emclient.NewForConfigOrDie(env.Config).NamespacedMetrics(ns).List("kafka_consumergroup_lag", orders)
		t.Logf("%v", err)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).To(ContainSubstring(`"kafka_consumergroup_lag" is not served here`))
		g.Expect(err.Error()).To(ContainSubstring(extmetrics.Metric))
		// The deadletters group still answers its own unknown paths as before.
		err = raw.Get().AbsPath("/apis/deadletters.retryops.dev/v1alpha1/namespaces/" + ns + "/nothing").Do(ctx).Error()
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).NotTo(ContainSubstring(extmetrics.Metric))
	})

	t.Run("an invalid label selector is a BadRequest", func(t *testing.T) {
		g := NewWithT(t)
		var code int
		err := raw.Get().AbsPath(path+extmetrics.Metric).Param("labelSelector", "consumerpipeline in (orders").Do(ctx).StatusCode(&code).Error()
		t.Logf("%d %v", code, err)
		g.Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "%v", err)
		g.Expect(code).To(Equal(http.StatusBadRequest))
	})

	t.Run("discovery lists the group and the metric as a namespaced resource one can list", func(t *testing.T) {
		g := NewWithT(t)
		dc := discovery.NewDiscoveryClientForConfigOrDie(env.Config)
		groups, err := dc.ServerGroups()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(slices.ContainsFunc(groups.Groups, func(gr metav1.APIGroup) bool {
			return gr.Name == emv1beta1.GroupName && gr.PreferredVersion.Version == "v1beta1"
		})).To(BeTrue())
		res, err := dc.ServerResourcesForGroupVersion(emv1beta1.SchemeGroupVersion.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.APIResources).To(HaveLen(1))
		r := res.APIResources[0]
		t.Logf("%s namespaced=%v kind=%s verbs=%v", r.Name, r.Namespaced, r.Kind, r.Verbs)
		g.Expect(r.Name).To(Equal(extmetrics.Metric))
		g.Expect(r.Namespaced).To(BeTrue())
		g.Expect([]string(r.Verbs)).To(Equal([]string{"list"}))
		out, err := env.Kubectl(nil, "api-resources", "--api-group="+emv1beta1.GroupName)
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("\n%s", out)
		g.Expect(out).To(ContainSubstring(extmetrics.Metric))
	})

	t.Run("the CA is never written into an external metrics APIService of another server", func(t *testing.T) {
		g := NewWithT(t)
		const elsewhere = "v1beta1.elsewhere.retryops.dev"
		other := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": map[string]any{"name": elsewhere},
			"spec": map[string]any{"group": "elsewhere.retryops.dev", "version": "v1beta1", "groupPriorityMinimum": int64(100), "versionPriority": int64(100),
				"service": map[string]any{"namespace": "keda", "name": "keda-operator-metrics-apiserver", "port": int64(443)}},
		}}
		g.Expect(c.Create(ctx, other)).To(Succeed())
		m := &dlqapi.CertManager{Client: c, Namespace: envtestutil.OperatorNamespace, SecretName: "retry-operator-deadletters-api-tls",
			Service: devenv.DeadLettersAPIService, ExternalMetricsAPIService: elsewhere}
		pair, err := m.Ensure(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Get(ctx, client.ObjectKey{Name: elsewhere}, other)).To(Succeed())
		_, has, _ := unstructured.NestedString(other.Object, "spec", "caBundle")
		g.Expect(has).To(BeFalse(), "the CA was written into another server's APIService")
		// The one pointing at the manager's Service has the CA (which is why it is Available).
		ours := &unstructured.Unstructured{}
		ours.SetAPIVersion("apiregistration.k8s.io/v1")
		ours.SetKind("APIService")
		g.Expect(c.Get(ctx, client.ObjectKey{Name: dlqapi.ExternalMetricsAPIServiceName}, ours)).To(Succeed())
		ca, _, _ := unstructured.NestedString(ours.Object, "spec", "caBundle")
		g.Expect(ca).NotTo(BeEmpty())
		g.Expect(strings.TrimSpace(string(mustB64(t, ca)))).To(Equal(strings.TrimSpace(string(pair.CA))))
	})
}

// userConfig is the rest.Config of a client-certificate user of envtest.
func userConfig(t *testing.T, env *envtestutil.Env, name string) *rest.Config {
	t.Helper()
	u, err := env.Environment.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.Config()
}
