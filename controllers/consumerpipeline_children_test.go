package controllers_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

// The children of a pipeline (its ConfigMap, Deployment and alert rules) and the alert rules of a
// queue. There is no controller manager in the shared suite: no garbage collection (owner
// references are checked instead) and no Deployment rollouts (DeploymentReady stays False, reason
// Progressing, and so does Ready).

const fieldManager = "retry-operator"

// childPipeline creates, in a new namespace, a queue "dlq", a policy "policy" (4 attempts), the
// source topic and a sink-mode pipeline "orders", and returns them.
func childPipeline(t *testing.T) (*retryv1alpha1.ConsumerPipeline, *retryv1alpha1.RetryPolicy, *retryv1alpha1.DeadLetterQueue) {
	return pipelineWith(t, nil, nil)
}

// pipelineWith is childPipeline with the policy and the pipeline changed by editPolicy and
// editPipeline (either may be nil) before they are created.
func pipelineWith(t *testing.T, editPolicy func(*retryv1alpha1.RetryPolicy), editPipeline func(*retryv1alpha1.ConsumerPipeline)) (*retryv1alpha1.ConsumerPipeline, *retryv1alpha1.RetryPolicy, *retryv1alpha1.DeadLetterQueue) {
	t.Helper()
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	source := ns + ".orders"
	createTopic(t, newKadm(t), source, 2)
	rp := backoffPolicy(ns, "policy", 4, time.Second, time.Minute)
	if editPolicy != nil {
		editPolicy(rp)
	}
	if err := env.Client.Create(ctx, rp); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(ns, "orders", source, "policy", "dlq")
	if editPipeline != nil {
		editPipeline(p)
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p, rp, dlq
}

// getter reads obj afresh, for Eventually.
func getter[T client.Object](obj T) func() (T, error) {
	return func() (T, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return obj, err
	}
}

func deploymentOf(p *retryv1alpha1.ConsumerPipeline) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeploymentName(p)}}
}

func configMapOf(p *retryv1alpha1.ConsumerPipeline) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.ConfigMapName(p)}}
}

func prometheusRule(namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(render.PrometheusRuleGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// ownedBy matches an object whose controller owner reference names owner (with
// blockOwnerDeletion, so that foreground deletion waits for it) and whose managed fields record the
// operator's server-side apply.
func ownedBy(owner client.Object, kind string) OmegaMatcher {
	return WithTransform(func(o client.Object) []string {
		var got []string
		if ref := metav1.GetControllerOf(o); ref != nil && ref.UID == owner.GetUID() && ref.Kind == kind && ref.Name == owner.GetName() &&
			ptr.Deref(ref.BlockOwnerDeletion, false) {
			got = append(got, "controller owner")
		}
		for _, m := range o.GetManagedFields() {
			if m.Manager == fieldManager && m.Operation == metav1.ManagedFieldsOperationApply {
				got = append(got, "applied by "+fieldManager)
			}
		}
		return got
	}, ConsistOf("controller owner", "applied by "+fieldManager))
}

func TestPipelineChildrenAreAppliedWithOwnerReferences(t *testing.T) {
	g := NewWithT(t)
	p, _, dlq := childPipeline(t)

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	d := deploymentOf(p)
	g.Eventually(getter(d), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	cm := configMapOf(p)
	g.Eventually(getter(cm), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	alerts := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.PipelineAlertsName(p)}}
	g.Eventually(getter(alerts), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	dlqAlerts := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeadLetterQueueAlertsName(dlq)}}
	g.Eventually(getter(dlqAlerts), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))

	// What was applied is what render makes: the config, the rolled hash, the dispatcher image, the
	// rule files.
	g.Expect(cm.Data).To(HaveKey(render.ConfigKey))
	g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue(render.AnnotationConfigHash, render.ConfigHash(cm)))
	g.Expect(d.Spec.Template.Spec.Containers).To(ContainElement(And(
		HaveField("Name", render.DispatcherContainer), HaveField("Image", controllers.DefaultDispatcherImage))))
	g.Expect(d.Spec.Replicas).To(Equal(ptr.To[int32](1)))
	g.Expect(alerts.Labels).To(HaveKeyWithValue(render.LabelAlertRules, "true"))
	g.Expect(alerts.Data).To(HaveKey(render.RuleFileKey(p.Namespace, p.Name, "consumerpipeline")))
	g.Expect(dlqAlerts.Data).To(HaveKey(render.RuleFileKey(p.Namespace, dlq.Name, "deadletterqueue")))
	// The runbook base URL reaches both kinds' rules (--alert-runbook-base-url).
	g.Expect(alerts.Data[render.RuleFileKey(p.Namespace, p.Name, "consumerpipeline")]).To(ContainSubstring("runbook_url: " + testRunbookBaseURL + "#consumerlaghigh"))
	g.Expect(dlqAlerts.Data[render.RuleFileKey(p.Namespace, dlq.Name, "deadletterqueue")]).To(ContainSubstring("runbook_url: " + testRunbookBaseURL + "#deadletterqueuesizeescalation"))

	// Status: topics and alerts ready; the Deployment never rolls out here (no Deployment
	// controller), so DeploymentReady, and with it Ready, say it is progressing.
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionAlertsReady), wait, poll).Should(And(isReady(),
		HaveField("Reason", "RulesApplied"), HaveField("Message", ContainSubstring("ConfigMap "+alerts.Name))))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady)()).To(And(notReady("Progressing"),
		HaveField("Message", ContainSubstring("waiting for the Deployment controller"))))
	g.Expect(pipelineReady(p)()).To(And(notReady("Progressing"), HaveField("Message", HavePrefix("DeploymentReady: "))))
	g.Expect(p.Status.Replicas).To(BeZero(), "the pods the Deployment runs: none without its controller")
	g.Expect(p.Status.ReadyReplicas).To(Equal(ptr.To[int32](0)))
	g.Expect(p.Status.Selector).NotTo(BeEmpty())

	// Nothing changes, nothing is written: a resync compares and leaves the children alone.
	children := map[string]client.Object{"deployment": d, "configMap": cm, "alerts": alerts}
	versions := func() (map[string]string, error) {
		out := map[string]string{}
		for what, obj := range children {
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
				return nil, err
			}
			out[what] = obj.GetResourceVersion()
		}
		return out, nil
	}
	before, err := versions()
	g.Expect(err).NotTo(HaveOccurred())
	holdsThroughResync(t, p, versions, Equal(before), "children rewritten at a resync")
}

func TestPipelinePolicyChangeRollsTheConfigHash(t *testing.T) {
	g := NewWithT(t)
	p, rp, _ := childPipeline(t)
	d := deploymentOf(p)
	hash := func() (string, error) {
		_, err := getter(d)()
		return d.Spec.Template.Annotations[render.AnnotationConfigHash], err
	}
	g.Eventually(hash, wait, poll).ShouldNot(BeEmpty())
	before, _ := hash()

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 3 })
	g.Eventually(hash, wait, poll).ShouldNot(Equal(before))
	after, _ := hash()
	cm := configMapOf(p)
	g.Expect(getter(cm)()).Error().NotTo(HaveOccurred())
	g.Expect(render.ConfigHash(cm)).To(Equal(after), "the annotation is the hash of the ConfigMap applied")

	// A change to the pipeline itself (a delay of its own) rolls it too.
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) {
		rp.Spec.Backoff.InitialDelay = metav1.Duration{Duration: 3 * time.Second}
	})
	g.Eventually(hash, wait, poll).ShouldNot(Or(Equal(before), Equal(after)))
}

func TestPipelineChildrenDriftIsReverted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p, _, _ := childPipeline(t)
	d := deploymentOf(p)
	g.Eventually(getter(d), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	want := d.DeepCopy()

	// Someone edits the Deployment: replicas, the image, an environment variable of ours.
	g.Eventually(func() error {
		if _, err := getter(d)(); err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To[int32](5)
		c := &d.Spec.Template.Spec.Containers[0]
		c.Image = "example.com/other:1"
		g.Expect(c.Env).NotTo(BeEmpty())
		c.Env[0].Value = "tampered"
		return env.Client.Update(ctx, d, client.FieldOwner("kubectl-edit"))
	}, wait, poll).Should(Succeed())
	g.Eventually(func() ([]any, error) {
		_, err := getter(d)()
		c := d.Spec.Template.Spec.Containers[0]
		return []any{*d.Spec.Replicas, c.Image, c.Env}, err
	}, wait, poll).Should(Equal([]any{*want.Spec.Replicas, want.Spec.Template.Spec.Containers[0].Image, want.Spec.Template.Spec.Containers[0].Env}))

	// Someone deletes the ConfigMap, or edits its config.
	cm := configMapOf(p)
	g.Expect(getter(cm)()).Error().NotTo(HaveOccurred())
	config := cm.Data[render.ConfigKey]
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() (string, error) { _, err := getter(configMapOf(p))(); return cm.Data[render.ConfigKey], err }, wait, poll).Should(Equal(config))
	update(t, cm, func(cm *corev1.ConfigMap) { cm.Data[render.ConfigKey] = "{}" })
	g.Eventually(func() (string, error) { _, err := getter(cm)(); return cm.Data[render.ConfigKey], err }, wait, poll).Should(Equal(config))
}

func TestPipelineDeploymentWaitsForTheTopicsAndReportsSpecErrors(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 3, time.Second, time.Minute))).To(Succeed())
	source := ns + ".later"
	p := newPipeline(ns, "own", source, "policy", "dlq")
	p.Spec.Sink = nil
	p.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
		// The operator's own volume name: a spec error only rendering finds.
		Volumes: []corev1.Volume{{Name: render.ConfigVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonInvalidSpec),
		HaveField("Message", ContainSubstring("spec.template.spec.volumes[0].name"))))
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec),
		HaveField("Note", ContainSubstring("spec.template.spec.volumes[0].name")))))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(deploymentOf(p)), deploymentOf(p))).To(Satisfy(apierrors.IsNotFound))

	// Fixed, but the source topic does not exist yet: the Deployment waits for it.
	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Template.Spec.Volumes[0].Name = "scratch" })
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(notReady("WaitingForTopics"))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(notReady(retryv1alpha1.ReasonSourceTopicMissing))
	g.Expect(getter(configMapOf(p))()).Error().NotTo(HaveOccurred(), "the ConfigMap does not wait")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(deploymentOf(p)), deploymentOf(p))).To(Satisfy(apierrors.IsNotFound))

	createTopic(t, newKadm(t), source, 1)
	d := deploymentOf(p)
	g.Eventually(getter(d), oneResync+wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/app:1"))
	g.Expect(d.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Name", "scratch")))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(notReady("Progressing"))
}

// TestAlertRulesFollowThePrometheusRuleCRD installs the PrometheusRule CRD while the manager runs
// (the shared suite starts without it), then removes it again so that later tests see the cluster as
// it was.
func TestAlertRulesFollowThePrometheusRuleCRD(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p, _, dlq := childPipeline(t)
	pipelineCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.PipelineAlertsName(p)}}
	dlqCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeadLetterQueueAlertsName(dlq)}}
	g.Eventually(getter(pipelineCM), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	g.Eventually(getter(dlqCM), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))

	crds := envtest.CRDInstallOptions{Paths: []string{filepath.Join(envtestutil.RepoRoot(), "config", "crd", "external", "monitoring.coreos.com_prometheusrules.yaml")}}
	_, err := envtest.InstallCRDs(env.Config, crds)
	g.Expect(err).NotTo(HaveOccurred())
	removed := false
	removeCRD := func() {
		if removed {
			return
		}
		removed = true
		g.Expect(envtest.UninstallCRDs(env.Config, crds)).To(Succeed())
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: "prometheusrules.monitoring.coreos.com"}, crd))
		}, time.Minute, poll).Should(BeTrue(), "the CRD is gone")
	}
	t.Cleanup(removeCRD)

	// The rules move to PrometheusRules, and their ConfigMaps go.
	pr := prometheusRule(p.Namespace, render.PipelineAlertsName(p))
	g.Eventually(getter(pr), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	dlqPR := prometheusRule(p.Namespace, render.DeadLetterQueueAlertsName(dlq))
	g.Eventually(getter(dlqPR), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))
	g.Expect(pr.GetLabels()).To(HaveKeyWithValue(render.LabelManagedBy, render.LabelManagedByValue))
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	g.Expect(groups).To(HaveLen(1))
	g.Eventually(gone(pipelineCM), wait, poll).Should(BeTrue())
	g.Eventually(gone(dlqCM), wait, poll).Should(BeTrue())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionAlertsReady), wait, poll).Should(And(isReady(),
		HaveField("Message", ContainSubstring("PrometheusRule "+pr.GetName()))))

	// A PrometheusRule edited or deleted out of band is put back.
	g.Expect(unstructured.SetNestedSlice(pr.Object, []any{map[string]any{"name": "mine", "rules": []any{}}}, "spec", "groups")).To(Succeed())
	g.Expect(env.Client.Update(ctx, pr, client.FieldOwner("kubectl-edit"))).To(Succeed())
	g.Eventually(func() ([]any, error) {
		_, err := getter(pr)()
		got, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
		return got, err
	}, wait, poll).Should(Equal(groups))
	g.Expect(env.Client.Delete(ctx, dlqPR)).To(Succeed())
	g.Eventually(getter(prometheusRule(dlqPR.GetNamespace(), dlqPR.GetName())), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))

	// Without the CRD (its PrometheusRules go with it) the rules are ConfigMaps again.
	removeCRD()
	g.Eventually(getter(pipelineCM), wait, poll).Should(ownedBy(p, "ConsumerPipeline"))
	g.Eventually(getter(dlqCM), wait, poll).Should(ownedBy(dlq, "DeadLetterQueue"))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionAlertsReady), wait, poll).Should(And(isReady(),
		HaveField("Message", ContainSubstring("ConfigMap "+pipelineCM.Name))))
}

// TestPipelineTemplateWithAnUnknownFieldIsASpecError: spec.template is stored schemaless, and the
// typed client drops what is not part of a PodSpec, so a typo ("contaienrs") used to vanish
// silently. It is now a user error naming the field, and no Deployment is made of it.
func TestPipelineTemplateWithAnUnknownFieldIsASpecError(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 3, time.Second, time.Minute))).To(Succeed())
	source := ns + ".typo"
	createTopic(t, newKadm(t), source, 1)
	p := newPipeline(ns, "typo", source, "policy", "dlq")
	p.Spec.Sink = nil
	p.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
	u := &unstructured.Unstructured{}
	g.Expect(env.Client.Scheme().Convert(p, u, nil)).To(Succeed())
	u.SetGroupVersionKind(retryv1alpha1.GroupVersion.WithKind("ConsumerPipeline"))
	g.Expect(unstructured.SetNestedField(u.Object, "Always", "spec", "template", "spec", "restartPolicyy")).To(Succeed())
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonInvalidSpec),
		HaveField("Message", ContainSubstring("spec.template.spec.restartPolicyy: unknown field"))))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(deploymentOf(p)), deploymentOf(p))).To(Satisfy(apierrors.IsNotFound))
}
