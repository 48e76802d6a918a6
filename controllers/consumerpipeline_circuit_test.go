package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/pkg/kubereport"
	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// breakerPipeline creates, in a new namespace, a queue, a policy with a circuit breaker, the source
// topic and a sink-mode pipeline "orders" with 2 replicas.
func breakerPipeline(t *testing.T) (*retryv1alpha1.ConsumerPipeline, *retryv1alpha1.RetryPolicy) {
	t.Helper()
	p, rp, _ := pipelineWith(t, func(rp *retryv1alpha1.RetryPolicy) {
		rp.Spec.CircuitBreaker = &retryv1alpha1.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 10,
			Window: &metav1.Duration{Duration: time.Minute}, OpenDuration: &metav1.Duration{Duration: 30 * time.Second},
			HalfOpenRequests: 5, CloseSuccessPercent: 80}
	}, func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Replicas = ptr.To[int32](2) })
	return p, rp
}

// serviceAccountConfig returns a rest.Config that authenticates as the ServiceAccount ns/name with
// a token from the TokenRequest API, the token a kubelet mounts into the pod.
func serviceAccountConfig(t *testing.T, ns, name string) *rest.Config {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := env.Client.SubResource("token").Create(context.Background(), sa, tr); err != nil {
		t.Fatalf("requesting a token of %s/%s: %v", ns, name, err)
	}
	return &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
}

// circuitOf reads the pipeline's status.circuit and CircuitClosed condition (at its generation).
func circuitOf(p *retryv1alpha1.ConsumerPipeline) func() (string, error) {
	return func() (string, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return "", err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionCircuitClosed)
		if c == nil || c.ObservedGeneration != p.Generation {
			return "", nil
		}
		return string(p.Status.Circuit) + " " + string(c.Status) + " " + c.Reason, nil
	}
}

// TestPipelineCircuitState: the consumers' ServiceAccount may patch its pipeline's circuit ConfigMap
// and nothing else; reports made with its token through circuitstate.Reporter (the dispatcher's
// code) reach status.circuit, the CircuitClosed condition, Ready, an Event and the operator's gauge;
// the worst state of the pods wins; a report a vanished pod stopped repeating goes stale, is
// ignored and deleted; a policy without a breaker leaves status.circuit unset.
func TestPipelineCircuitState(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p, rp := breakerPipeline(t)
	ns := p.Namespace

	// The access objects, owned by the pipeline.
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.ServiceAccountName(p)}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CircuitConfigMapName(p)}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.ServiceAccountName(p)}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.ServiceAccountName(p)}},
	} {
		g.Eventually(getter(obj), wait, poll).Should(ownedBy(p, "ConsumerPipeline"), "%T %s", obj, obj.GetName())
	}
	g.Eventually(circuitOf(p), wait, poll).Should(Equal("Closed True CircuitClosed"))

	// What the ServiceAccount may do: get and patch its circuit ConfigMap, nothing else.
	saCfg := serviceAccountConfig(t, ns, render.ServiceAccountName(p))
	core, err := typedcorev1.NewForConfig(saCfg)
	g.Expect(err).NotTo(HaveOccurred())
	cms := core.ConfigMaps(ns)
	_, err = cms.Get(ctx, render.CircuitConfigMapName(p), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cms.Patch(ctx, render.CircuitConfigMapName(p), types.MergePatchType, []byte(`{"data":{"probe":null}}`), metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for what, call := range map[string]func() error{
		"get the dispatcher config": func() error {
			_, err := cms.Get(ctx, render.ConfigMapName(p), metav1.GetOptions{})
			return err
		},
		"patch the dispatcher config": func() error {
			_, err := cms.Patch(ctx, render.ConfigMapName(p), types.MergePatchType, []byte(`{"data":{"x":"y"}}`), metav1.PatchOptions{})
			return err
		},
		"list ConfigMaps": func() error { _, err := cms.List(ctx, metav1.ListOptions{}); return err },
		"delete its ConfigMap": func() error {
			return cms.Delete(ctx, render.CircuitConfigMapName(p), metav1.DeleteOptions{})
		},
		"read Secrets": func() error { _, err := core.Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"patch the pipeline's status": func() error {
			c, err := client.New(saCfg, client.Options{Scheme: envtestutil.Scheme()})
			if err != nil {
				return err
			}
			q := p.DeepCopy()
			return c.Status().Patch(ctx, q, client.RawPatch(types.MergePatchType, []byte(`{"status":{"circuit":"Closed"}}`)))
		},
	} {
		g.Expect(apierrors.IsForbidden(call())).To(BeTrue(), "the consumers' ServiceAccount could %s", what)
	}

	reporter := func(pod string) *circuitstate.Reporter {
		return &circuitstate.Reporter{ConfigMaps: kubereport.ConfigMaps{Client: cms}, ConfigMap: render.CircuitConfigMapName(p), Pod: pod,
			Interval: circuitReportInterval, RetryInterval: 100 * time.Millisecond}
	}
	a, b := reporter("orders-dispatcher-a"), reporter("orders-dispatcher-b")
	stopA, stopB := a.Start(), b.Start()
	defer stopA()

	// One pod opens: the pipeline is Open and not Ready, with an Event and the gauge at 2.
	a.Observe(circuitstate.Open)
	g.Eventually(circuitOf(p), wait, poll).Should(Equal("Open False CircuitOpen"))
	c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionCircuitClosed)
	g.Expect(c.Message).To(And(ContainSubstring("1 of 2 pods"), ContainSubstring("orders-dispatcher-a"), ContainSubstring("consumption is paused")))
	ready := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionReady)
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(retryv1alpha1.ReasonCircuitOpen))
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(
		WithTransform(func(e eventsv1.Event) string { return e.Type + " " + e.Reason }, Equal("Warning CircuitOpen"))))
	labels := map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelConsumerPipeline: p.Name}
	g.Eventually(func() float64 { return scrapeMetrics(t).value(opmetrics.ConsumerPipelineCircuitState, labels) }, wait, poll).Should(Equal(2.0))

	// The worst state wins: a half-open pod does not hide an open one.
	b.Observe(circuitstate.HalfOpen)
	g.Eventually(func() (map[string]string, error) {
		cm, err := cms.Get(ctx, render.CircuitConfigMapName(p), metav1.GetOptions{})
		return cm.Data, err
	}, wait, poll).Should(HaveLen(2))
	holdsThroughResync(t, p, circuitOf(p), Equal("Open False CircuitOpen"))
	a.Observe(circuitstate.Closed)
	g.Eventually(circuitOf(p), wait, poll).Should(Equal("HalfOpen False CircuitHalfOpen"))
	g.Expect(scrapeMetrics(t).value(opmetrics.ConsumerPipelineCircuitState, labels)).To(Equal(1.0))
	// The half-open pod stops: it removes its report.
	stopB()
	g.Eventually(circuitOf(p), wait, poll).Should(Equal("Closed True CircuitClosed"))
	g.Expect(scrapeMetrics(t).value(opmetrics.ConsumerPipelineCircuitState, labels)).To(Equal(0.0))

	// A pod that vanished with its breaker open (its report not repeated) counts until its report is
	// three intervals old, then is ignored and its entry deleted. It reports until the pipeline shows
	// it, however slowly the reconcile comes, then vanishes.
	since := time.Now().UTC()
	var crashed circuitstate.Entry
	g.Eventually(func() (string, error) {
		crashed = circuitstate.Entry{State: circuitstate.Open, Since: since, ReportedAt: time.Now().UTC()}
		if _, err := cms.Patch(ctx, render.CircuitConfigMapName(p), types.MergePatchType, circuitstate.MergePatch("orders-dispatcher-gone", &crashed), metav1.PatchOptions{}); err != nil {
			return "", err
		}
		return circuitOf(p)()
	}, wait, poll).Should(Equal("Open False CircuitOpen"))
	g.Eventually(circuitOf(p), wait, poll).Should(Equal("Closed True CircuitClosed"))
	g.Expect(time.Since(crashed.ReportedAt)).To(BeNumerically(">=", 3*circuitReportInterval), "ignored before it was stale")
	g.Eventually(func() (map[string]string, error) {
		cm, err := cms.Get(ctx, render.CircuitConfigMapName(p), metav1.GetOptions{})
		return cm.Data, err
	}, wait, poll).ShouldNot(HaveKey("orders-dispatcher-gone"))

	// Without a circuit breaker there is no state to show.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rp), rp)).To(Succeed())
	rp.Spec.CircuitBreaker = nil
	g.Expect(env.Client.Update(ctx, rp)).To(Succeed())
	g.Eventually(circuitOf(p), wait, poll).Should(Equal(" True NoCircuitBreaker"))
	g.Eventually(func() int { return scrapeMetrics(t).series(opmetrics.ConsumerPipelineCircuitState, labels) }, wait, poll).Should(BeZero())
}

// TestOperatorRoleMayGrantTheConsumersAccess: Kubernetes refuses to let anyone create a Role granting
// more than they hold. Impersonating a user bound to the operator's generated ClusterRole
// (config/rbac/role.yaml), the consumers' Role and RoleBinding can be applied.
func TestOperatorRoleMayGrantTheConsumersAccess(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := asOperator(t, ns)

	p := newPipeline(ns, "orders", ns+".orders", "policy", "dlq")
	for _, obj := range []client.Object{render.ServiceAccount(p), render.CircuitConfigMap(p), render.CircuitRole(p), render.CircuitRoleBinding(p)} {
		// The ClusterRoleBinding may take a moment to reach the authorizer's cache.
		g.Eventually(func() error {
			return c.Create(ctx, obj.DeepCopyObject().(client.Object))
		}, 10*time.Second, 200*time.Millisecond).Should(Succeed(), "as the operator, creating %T %s", obj, obj.GetName())
	}
	// And a Role granting more is refused: the check is real.
	wider := render.CircuitRole(p)
	wider.Name = "wider"
	wider.Rules = append(wider.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}})
	err := c.Create(ctx, wider)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating a Role beyond the operator's rights: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("attempting to grant RBAC permissions not currently held"))
}

// TestPipelineNeverAdoptsAChildItDoesNotControl: a Role and a RoleBinding created beforehand with
// the names of a pipeline's circuit Role and RoleBinding (by someone who predicted them, to have
// the operator rewrite the rules or the subjects) are left byte for byte unchanged, and the
// pipeline reports ChildConflict naming them (they used to be force-applied and adopted).
func TestPipelineNeverAdoptsAChildItDoesNotControl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	p, _, _ := pipelineWith(t, nil, func(p *retryv1alpha1.ConsumerPipeline) {
		role = &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.CircuitRole(p).Name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
		binding = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.CircuitRoleBinding(p).Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}}}
		g.Expect(env.Client.Create(ctx, role)).To(Succeed())
		g.Expect(env.Client.Create(ctx, binding)).To(Succeed())
	})
	roleBefore, bindingBefore := role.DeepCopy(), binding.DeepCopy()

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(And(
		HaveField("Reason", retryv1alpha1.ReasonChildConflict), HaveField("Message", ContainSubstring("Role "+role.Name))))
	// Another resync at least: nothing was written to either.
	holdsThroughResync(t, p, func() ([]string, error) {
		r, b := &rbacv1.Role{}, &rbacv1.RoleBinding{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(role), r); err != nil {
			return nil, err
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(binding), b); err != nil {
			return nil, err
		}
		return []string{r.ResourceVersion, b.ResourceVersion}, nil
	}, Equal([]string{roleBefore.ResourceVersion, bindingBefore.ResourceVersion}))
	r := &rbacv1.Role{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(role), r)).To(Succeed())
	g.Expect(r.Rules).To(Equal(roleBefore.Rules))
	g.Expect(r.OwnerReferences).To(BeEmpty())
}
