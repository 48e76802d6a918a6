package render_test

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// TestARuleSetsDigestFollowsItsRenderings: the controllers skip rendering a resource's rule file
// while the digest of its RuleSet stays the one last found applied (apply.OwnedRendered), so each
// change to the inputs that changes either rendering (the ConfigMap or the PrometheusRule) must
// change the digest, and inputs that render the same must digest the same.
func TestARuleSetsDigestFollowsItsRenderings(t *testing.T) {
	type change struct {
		name   string
		mutate func(*render.Inputs)
	}
	changes := []change{
		{"nothing", func(*render.Inputs) {}},
		{"the same inputs made again", func(in *render.Inputs) { in.Pipeline = in.Pipeline.DeepCopy() }},
		{"maxConsumerLag", func(in *render.Inputs) { in.Pipeline.Spec.Alerts.MaxConsumerLag = ptr.To[int64](7) }},
		{"maxRetryBacklog", func(in *render.Inputs) { in.Pipeline.Spec.Alerts.MaxRetryBacklog = ptr.To[int64](7) }},
		{"for", func(in *render.Inputs) { in.Pipeline.Spec.Alerts.For = pdur(time.Minute) }},
		{"a rule label", func(in *render.Inputs) { in.RuleLabels = map[string]string{"release": "prom"} }},
		{"the runbooks", func(in *render.Inputs) { in.RunbookBaseURL = "https://runbooks.example/retry" }},
		{"the name", func(in *render.Inputs) { in.Pipeline.Name = "chat2" }},
		{"the namespace", func(in *render.Inputs) { in.Pipeline.Namespace = "shop2" }},
		{"the replicas (not in the rules)", func(in *render.Inputs) { in.Pipeline.Spec.Replicas = ptr.To[int32](5) }},
	}
	base := sinkURIInputs(t)
	baseSet, err := render.PipelineRuleSet(base)
	if err != nil {
		t.Fatal(err)
	}
	baseDigest, baseCM, basePR := digestAndRenderings(t, baseSet)
	for _, c := range changes {
		in := sinkURIInputs(t)
		c.mutate(in)
		set, err := render.PipelineRuleSet(in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		digest, cm, pr := digestAndRenderings(t, set)
		rendersSame := reflect.DeepEqual(cm, baseCM) && reflect.DeepEqual(pr, basePR)
		if (digest == baseDigest) != rendersSame {
			t.Errorf("%s: digest equal %v, renderings equal %v", c.name, digest == baseDigest, rendersSame)
		}
		if c.name != "nothing" && c.name != "the same inputs made again" && c.name != "the replicas (not in the rules)" && rendersSame {
			t.Errorf("%s: the change does not show in the rules: pick another", c.name)
		}
	}

	// The queue's set, likewise.
	dlq := defaultDLQ()
	qBase, err := render.DeadLetterQueueRuleSet(&render.DeadLetterQueueInputs{DLQ: dlq})
	if err != nil {
		t.Fatal(err)
	}
	qDigest, qCM, qPR := digestAndRenderings(t, qBase)
	for name, in := range map[string]*render.DeadLetterQueueInputs{
		"maxMessages": {DLQ: func() *retryv1alpha1.DeadLetterQueue {
			d := dlq.DeepCopy()
			d.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](3)}
			return d
		}()},
		"the topic":    {DLQ: func() *retryv1alpha1.DeadLetterQueue { d := dlq.DeepCopy(); d.Spec.Topic.Name = "other.dlq"; return d }()},
		"a rule label": {DLQ: dlq, RuleLabels: map[string]string{"release": "prom"}},
	} {
		set, err := render.DeadLetterQueueRuleSet(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		digest, cm, pr := digestAndRenderings(t, set)
		if digest == qDigest || (reflect.DeepEqual(cm, qCM) && reflect.DeepEqual(pr, qPR)) {
			t.Errorf("queue, %s: digest equal %v, renderings equal %v", name, digest == qDigest, reflect.DeepEqual(cm, qCM))
		}
	}
}

func digestAndRenderings(t *testing.T, set render.RuleSet) ([32]byte, any, any) {
	t.Helper()
	d, err := set.Digest()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := set.Digest()
	if again != d {
		t.Fatal("the digest of one set differs from one call to the next")
	}
	cm, err := set.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := set.PrometheusRule()
	if err != nil {
		t.Fatal(err)
	}
	return d, cm, pr.Object
}
