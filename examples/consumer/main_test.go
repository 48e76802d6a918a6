package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// recorder is an Index that remembers the attempt each document was stored at.
type recorder struct {
	mu     sync.Mutex
	stored map[string]int32
}

func (r *recorder) Put(ctx context.Context, id string, _ []float32) error {
	info, _ := retryloop.Info(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stored[id] = info.Attempt
	return nil
}

func (r *recorder) snapshot() map[string]int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int32{}
	for k, v := range r.stored {
		out[k] = v
	}
	return out
}

// TestConsumer runs the consumer as the operator runs it (a config file named by RETRYOPS_CONFIG
// and the KAFKA_* variables) against an in-process Kafka: a document is embedded at once, one whose
// first attempt fails is retried through the retry tier and embedded at its second, and a malformed
// one is dead-lettered with the headers the dispatcher writes. Cancelling the context (SIGTERM)
// stops it without an error.
func TestConsumer(t *testing.T) {
	g := gomega.NewWithT(t)
	const src, dlq = "demo.documents.chunks", "demo.chatbot.dlq"
	tiers := []string{src + ".retry.1", src + ".retry.2"}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.SeedTopics(2, append(tiers, src, dlq)...))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	t.Cleanup(c.Close)

	// The operator's file: the pipeline, its policy and the group settings; the topics come as
	// environment variables.
	file := config.Config{
		Pipeline: config.Pipeline{Namespace: "demo", Name: "documents"},
		Policy: &policy.Spec{
			MaxAttempts:    3,
			Backoff:        policy.Backoff{InitialDelay: policy.D(20 * time.Millisecond), Multiplier: "2", MaxDelay: policy.D(time.Second)},
			Classification: &policy.Classification{DefaultAction: "Retry"},
		},
		Group:  config.GroupSettings{SessionTimeout: policy.PD(3 * time.Second), HeartbeatInterval: policy.PD(300 * time.Millisecond)},
		Listen: config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled},
	}
	data, err := json.Marshal(file)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	path := filepath.Join(t.TempDir(), "config.json")
	g.Expect(os.WriteFile(path, data, 0o600)).To(gomega.Succeed())
	env := map[string]string{
		config.EnvConfig:           path,
		config.EnvBootstrapServers: strings.Join(c.ListenAddrs(), ","),
		config.EnvTopicPrimary:     src,
		config.EnvTopicRetry:       strings.Join(tiers, ","),
		config.EnvTopicDLQ:         dlq,
	}

	index := &recorder{stored: map[string]int32{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, index, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(dlq, tiers[0]),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	t.Cleanup(cl.Close)
	produce := func(key, value string) {
		g.Expect(cl.ProduceSync(context.Background(), &kgo.Record{Topic: src, Key: []byte(key), Value: []byte(value)}).FirstErr()).To(gomega.Succeed())
	}
	produce("doc-1", `{"id":"doc-1","text":"retry loops in your own consumer"}`)
	produce("doc-2", `{"id":"doc-2","text":"the embedding service is down at first","failFirst":1}`)
	produce("doc-3", `{"id":"doc-3","text":`)

	g.Eventually(index.snapshot).WithTimeout(20 * time.Second).Should(gomega.Equal(map[string]int32{"doc-1": 1, "doc-2": 2}))

	byTopic := map[string][]*kgo.Record{}
	g.Eventually(func() int {
		pctx, pcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer pcancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { byTopic[r.Topic] = append(byTopic[r.Topic], r) })
		return len(byTopic[dlq]) + len(byTopic[tiers[0]])
	}).WithTimeout(20 * time.Second).Should(gomega.Equal(2))
	g.Expect(keys(byTopic[tiers[0]])).To(gomega.Equal([]string{"doc-2"}), "the retried document in the first tier")
	g.Expect(keys(byTopic[dlq])).To(gomega.Equal([]string{"doc-3"}), "the dead-lettered document")
	dead := headerMap(byTopic[dlq][0])
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.Reason, headers.ReasonNonRetriable))
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.Attempts, "1"))
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.Pipeline, "demo/documents"))
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.ConsumerGroup, "demo.documents"))
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.OriginalTopic, src))
	g.Expect(dead).To(gomega.HaveKeyWithValue(headers.ErrorType, "SyntaxError"))
	g.Expect(dead[headers.ErrorMessage]).To(gomega.HavePrefix("malformed document: "))

	cancel()
	g.Eventually(done).WithTimeout(20 * time.Second).Should(gomega.Receive(gomega.BeNil()))
}

func keys(rs []*kgo.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.Key))
	}
	return out
}

func headerMap(r *kgo.Record) map[string]string {
	out := map[string]string{}
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}
