package retryloop_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// TestLibraryModeRefusesAnotherPipelinesTierRecord: in library mode too, a record of the loop's
// retry tier naming another pipeline is never handed to the handler; its dead letter names the
// loop's pipeline, with reason malformed and error type OtherPipelineRecord, which a Replay
// without a target skips.
func TestLibraryModeRefusesAnotherPipelinesTierRecord(t *testing.T) {
	src, tier, dlq := "orders", "orders.retry.1", "orders.dlq"
	c := dt.Cluster(t, map[string]int32{src: 1, tier: 1, dlq: 1})
	pol := &policy.Spec{MaxAttempts: 3, Backoff: policy.Backoff{InitialDelay: dt.D(time.Second), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	file := config.Config{
		Pipeline: config.Pipeline{Namespace: "shop", Name: "orders"}, Policy: pol,
		Group:  config.GroupSettings{SessionTimeout: dt.PD(3 * time.Second), HeartbeatInterval: dt.PD(300 * time.Millisecond)},
		Listen: config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled},
	}
	env := map[string]string{
		config.EnvBootstrapServers: strings.Join(c.ListenAddrs(), ","),
		config.EnvTopicPrimary:     src,
		config.EnvTopicRetry:       tier,
		config.EnvTopicDLQ:         dlq,
		config.EnvConsumerGroup:    "library",
	}
	data, _ := json.Marshal(file)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := retryloop.LoadConfig(path, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	loop, err := retryloop.New(cfg, func(context.Context, *kgo.Record) error {
		handled.Add(1)
		return nil
	}, retryloop.WithoutHTTP())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	now := headers.FormatTime(time.Now())
	rec := &kgo.Record{Topic: tier, Key: []byte("foreign"), Value: []byte("foreign")}
	for _, h := range [][2]string{
		{headers.OriginalTopic, src}, {headers.OriginalPartition, "0"}, {headers.OriginalOffset, "7"},
		{headers.OriginalTimestamp, now}, {headers.Attempts, "1"}, {headers.Due, now}, {headers.Pipeline, "shop/billing"},
	} {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h[0], Value: []byte(h[1])})
	}
	dt.Produce(t, dt.Client(t, c), rec)
	dls := dt.ReadTopic(t, c, dlq, 1, 20*time.Second)
	if len(dls) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dls))
	}
	reason, _ := dt.Header(dls[0], headers.Reason)
	et, _ := dt.Header(dls[0], headers.ErrorType)
	pipeline, _ := dt.Header(dls[0], headers.Pipeline)
	if reason != headers.ReasonMalformed || et != headers.ErrorTypeOtherPipeline || pipeline != "shop/orders" {
		t.Errorf("dead letter: reason %q, error type %q, pipeline %q; want %s, %s, shop/orders",
			reason, et, pipeline, headers.ReasonMalformed, headers.ErrorTypeOtherPipeline)
	}
	if n := handled.Load(); n != 0 {
		t.Errorf("the handler got %d records, want none", n)
	}
}
