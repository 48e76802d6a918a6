// Package librarymode checks that a library-mode consumer (sdk/retryloop) and the operator's
// dispatcher (sdk/dispatcher with its HTTP sink) are one data plane to the control plane: the same
// rendered config, the same dead letters, read by the operator's one dead-letter reader.
package librarymode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/retry"
)

const (
	namespace = "shop"
	name      = "orders"
	source    = "orders"
	dlqTopic  = "orders.dlq"
	timeout   = 30 * time.Second
)

// resources are the pipeline's three resources as a user writes them: 503 retried (two more
// deliveries at most), 400 dead-lettered by a rule of its own, so that the dead letter names it.
func resources() (*retryv1alpha1.ConsumerPipeline, *retryv1alpha1.RetryPolicy, *retryv1alpha1.DeadLetterQueue) {
	d := func(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }
	rp := &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: namespace},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: 3,
			Backoff:     retryv1alpha1.Backoff{InitialDelay: d(50 * time.Millisecond), Multiplier: "2", MaxDelay: d(time.Second)},
			Classification: &retryv1alpha1.Classification{
				DefaultAction: retryv1alpha1.DefaultAction(retry.ActionDeadLetter),
				Rules: []retryv1alpha1.ClassificationRule{
					{Name: "transient-http", Action: retryv1alpha1.ActionRetry, HTTPStatuses: []retryv1alpha1.HTTPStatusMatch{"500-599"}},
					{Name: "bad-request", Action: retryv1alpha1.ActionDeadLetter, HTTPStatuses: []retryv1alpha1.HTTPStatusMatch{"400"}},
				},
			},
		},
	}
	dlq := &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-dlq", Namespace: namespace},
		Spec:       retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: dlqTopic}},
	}
	p := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: source},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: rp.Name},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: dlq.Name},
		},
	}
	return p, rp, dlq
}

// tiers computes the retry tiers as the pipeline controller does.
func tiers(t *testing.T, p *retryv1alpha1.ConsumerPipeline, rp *retryv1alpha1.RetryPolicy) config.Tiers {
	t.Helper()
	comp, err := retry.Compile(policy.FromSpec(rp.Spec))
	if err != nil {
		t.Fatal(err)
	}
	return config.BuildTiers(config.TierBase("", p.Namespace, p.Name), config.RetryTopicNaming(retryv1alpha1.NamingByAttempt), comp.Plan())
}

// cluster starts a kfake cluster with the pipeline's topics: the source, its tiers and the dead
// letter topic, two partitions each.
func cluster(t *testing.T, ts config.Tiers) *kfake.Cluster {
	t.Helper()
	topics := map[string]int32{source: 2, dlqTopic: 2}
	for _, n := range ts.Names() {
		topics[n] = 2
	}
	return dt.Cluster(t, topics)
}

// renderedConfig renders the pipeline's ConfigMap with the operator's render package and loads
// it as the pod does: the config file mounted and named by RETRYOPS_CONFIG, the ConfigMap's
// seed-style variables in the environment.
func renderedConfig(t *testing.T, p *retryv1alpha1.ConsumerPipeline, rp *retryv1alpha1.RetryPolicy, dlq *retryv1alpha1.DeadLetterQueue, servers []string) *config.Config {
	t.Helper()
	cm, err := render.ConfigMap(&render.Inputs{
		Pipeline: p, Policy: rp, DLQ: dlq, Tiers: tiers(t, p, rp),
		DefaultBootstrapServers: servers,
		DispatcherImage:         "ghcr.io/retryops/retry-dispatcher:test",
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), render.ConfigKey)
	if err := os.WriteFile(path, []byte(cm.Data[render.ConfigKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{config.EnvConfig: path}
	for k, v := range cm.Data {
		if k != render.ConfigKey {
			env[k] = v
		}
	}
	cfg, err := config.Load("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// The pods' listeners are not the test's: no ports bound.
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled}
	return cfg
}

// readDeadLetters reads the whole dead letter topic as the deadletters API and kubectl dlq do:
// the franz scanner's records, each through deadletters.ParseEntry.
func readDeadLetters(t *testing.T, c *kfake.Cluster) []deadletters.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	f := franz.NewFactory(franz.WithRequestTimeout(20 * time.Second))
	defer f.Close()
	conn := kafka.Connection{BootstrapServers: c.ListenAddrs(), ClientID: "test"}
	admin, err := f.Admin(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := admin.ListOffsets(ctx, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[int32]kafka.OffsetRange{}
	for _, p := range offs[dlqTopic] {
		ranges[p.Partition] = kafka.OffsetRange{From: p.Start, To: p.End}
	}
	var out []deadletters.Entry
	err = f.Scan(ctx, conn, map[string]map[int32]kafka.OffsetRange{dlqTopic: ranges}, func(r kafka.Record) {
		out = append(out, deadletters.ParseEntry(r))
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// headerKeys is the sorted list of e's header keys (a repeated key appears as often as it is repeated).
func headerKeys(e deadletters.Entry) []string {
	out := make([]string, 0, len(e.Headers))
	for _, h := range e.Headers {
		out = append(out, h.Key)
	}
	slices.Sort(out)
	return out
}

// headerValue is the last value of header k in e.
func headerValue(e deadletters.Entry, k string) (string, bool) {
	v, ok := e.Header(k)
	return string(v), ok
}
