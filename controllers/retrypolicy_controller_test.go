package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

const wait, poll = 20 * time.Second, 50 * time.Millisecond

func samplePolicy(t *testing.T, name, ns string) *retryv1alpha1.RetryPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "samples", "retry_v1alpha1_retrypolicy_"+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := &retryv1alpha1.RetryPolicy{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		t.Fatal(err)
	}
	p.Namespace = ns
	return p
}

func nominal(st retryv1alpha1.RetryPolicyStatus) []string {
	var out []string
	for _, s := range st.Schedule {
		out = append(out, s.Delay.Duration.String())
	}
	return out
}

func TestEverySamplePolicyBecomesReadyWithItsSchedule(t *testing.T) {
	ns := newNamespace(t)
	want := map[string]struct {
		summary string
		delays  []string
		total   [2]time.Duration
	}{
		"chatbot":        {"2s 4s 8s 16s 32s", []string{"2s", "4s", "8s", "16s", "32s"}, [2]time.Duration{62 * time.Second, 67 * time.Second}},
		"grading":        {"2s 4s 8s", []string{"2s", "4s", "8s"}, [2]time.Duration{11200 * time.Millisecond, 16800 * time.Millisecond}},
		"delegation":     {"1s 2s 4s", []string{"1s", "2s", "4s"}, [2]time.Duration{5600 * time.Millisecond, 8400 * time.Millisecond}},
		"documents":      {"10m 20m 40m 1h", []string{"10m0s", "20m0s", "40m0s", "1h0m0s"}, [2]time.Duration{130 * time.Minute, 130 * time.Minute}},
		"generic-worker": {"1s 2s", []string{"1s", "2s"}, [2]time.Duration{1500 * time.Millisecond, 4500 * time.Millisecond}},
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := samplePolicy(t, name, ns)
			g.Expect(env.Client.Create(context.Background(), p)).To(Succeed())
			g.Eventually(readyCondition(p, func() []metav1.Condition { return p.Status.Conditions }), wait, poll).
				Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonValid)))
			g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
			g.Expect(p.Status.ScheduleSummary).To(Equal(w.summary))
			g.Expect(nominal(p.Status)).To(Equal(w.delays))
			g.Expect(p.Status.Schedule[0].Attempt).To(Equal(int32(2)))
			g.Expect(p.Status.Schedule[0].Tier).To(Equal(int32(1)))
			g.Expect(p.Status.TotalDelay.Earliest.Duration).To(Equal(w.total[0]))
			g.Expect(p.Status.TotalDelay.Latest.Duration).To(Equal(w.total[1]))
		})
	}
}

func TestInvalidPatternIsReportedAsInvalidSpecWithAWarning(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	p := samplePolicy(t, "delegation", ns)
	p.Spec.Classification.Rules[1].MessagePatterns = append(p.Spec.Classification.Rules[1].MessagePatterns, "(?i)timeout(")
	g.Expect(env.Client.Create(context.Background(), p)).To(Succeed())

	g.Eventually(readyCondition(p, func() []metav1.Condition { return p.Status.Conditions }), wait, poll).
		Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec),
			HaveField("Message", And(ContainSubstring("retryable-messages"), ContainSubstring(`"(?i)timeout("`), ContainSubstring("missing closing )")))))
	g.Expect(p.Status.Schedule).To(BeEmpty())
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", "Warning"), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec), HaveField("Note", ContainSubstring(`"(?i)timeout("`)))))

	// Fixing the pattern makes the policy Ready, with a Normal event.
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)).To(Succeed())
	rules := p.Spec.Classification.Rules[1].MessagePatterns
	p.Spec.Classification.Rules[1].MessagePatterns = rules[:len(rules)-1]
	g.Expect(env.Client.Update(context.Background(), p)).To(Succeed())
	g.Eventually(readyCondition(p, func() []metav1.Condition { return p.Status.Conditions }), wait, poll).
		Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(HaveField("Type", "Normal"), HaveField("Reason", retryv1alpha1.ReasonValid))))
}

func TestUsageFollowsPipelinesThatReferenceThePolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	p := samplePolicy(t, "chatbot", ns)
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	usage := func() (int32, []string, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
		if p.Status.Pipelines == nil {
			return -1, nil, err
		}
		return *p.Status.Pipelines, p.Status.PipelineNames, err
	}
	pipeline := func(name, policy string) *retryv1alpha1.ConsumerPipeline {
		return &retryv1alpha1.ConsumerPipeline{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: retryv1alpha1.ConsumerPipelineSpec{
				Source:             retryv1alpha1.PipelineSource{Topic: retryv1alpha1.TopicName(name)},
				RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: policy},
				DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"},
				Sink:               &retryv1alpha1.Sink{URI: "http://sink.example:8080/"},
			},
		}
	}
	g.Eventually(func() (int32, error) { n, _, err := usage(); return n, err }, wait, poll).Should(Equal(int32(0)))
	g.Expect(p.Status.PipelineNames).To(BeEmpty())

	a, b, other := pipeline("chat-b", "chatbot"), pipeline("chat-a", "chatbot"), pipeline("unrelated", "grading")
	for _, o := range []*retryv1alpha1.ConsumerPipeline{a, b, other} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
	}
	g.Eventually(func() ([]string, error) { _, names, err := usage(); return names, err }, wait, poll).Should(Equal([]string{"chat-a", "chat-b"}))
	g.Expect(*p.Status.Pipelines).To(Equal(int32(2)))

	// Moving a pipeline to another policy and deleting one bring the count down.
	// The operator writes the pipeline too (finalizer, status): retry a conflicting update.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
			return err
		}
		a.Spec.RetryPolicyRef.Name = "grading"
		return env.Client.Update(ctx, a)
	})).To(Succeed())
	g.Eventually(func() ([]string, error) { _, names, err := usage(); return names, err }, wait, poll).Should(Equal([]string{"chat-a"}))
	g.Expect(env.Client.Delete(ctx, b)).To(Succeed())
	g.Eventually(func() (int32, error) { n, _, err := usage(); return n, err }, wait, poll).Should(Equal(int32(0)))
	g.Expect(p.Status.PipelineNames).To(BeEmpty())
}

func TestKubectlGetRetryPoliciesShowsTheColumns(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	p := samplePolicy(t, "chatbot", ns)
	g.Expect(env.Client.Create(context.Background(), p)).To(Succeed())
	g.Eventually(readyCondition(p, func() []metav1.Condition { return p.Status.Conditions }), wait, poll).Should(Not(BeNil()))

	out, err := env.Kubectl(nil, "get", "rp", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "ATTEMPTS", "SCHEDULE", "PIPELINES", "READY", "AGE"}))
	g.Expect(lines[1]).To(MatchRegexp(`^chatbot\s+6\s+2s 4s 8s 16s 32s\s+0\s+True\s+\S+$`))
}

// TestAPolicyValidFromItsCreationRecordsNoEvent: its status says it is valid; an event is for a
// change (at 10,000 resources, 2,504 policies made 2,504 Valid events on the way to Ready). The
// Warning of a later mistake is the barrier: events are sent in order, so a Valid event would be
// there before it.
func TestAPolicyValidFromItsCreationRecordsNoEvent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	p := samplePolicy(t, "delegation", ns)
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(readyCondition(p, func() []metav1.Condition { return p.Status.Conditions }), wait, poll).
		Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonValid)))

	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Classification.Rules[1].MessagePatterns = append(p.Spec.Classification.Rules[1].MessagePatterns, "(?i)timeout(")
		return env.Client.Update(ctx, p)
	})).To(Succeed())
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ConsistOf(
		And(HaveField("Type", "Warning"), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec))))
}
