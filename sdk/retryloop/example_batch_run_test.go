package retryloop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// Each record of a batch gets its own fate: here one is saved, one fails once and is saved from
// its retry tier in a later batch, and one is dead-lettered; how the records fall into batches is
// Kafka's doing, so their fates are printed in key order.
func ExampleNewBatch_fates() {
	cfg := &retryloop.Config{
		Pipeline: config.Pipeline{Namespace: "shop", Name: "rows"},
		Topics:   config.Topics{Source: "rows", DeadLetter: "rows.dlq"},
		Policy: &policy.Spec{
			MaxAttempts:    3,
			Backoff:        policy.Backoff{InitialDelay: policy.D(10 * time.Millisecond), Multiplier: "2", MaxDelay: policy.D(time.Second)},
			Classification: &policy.Classification{DefaultAction: "Retry"},
		},
		Group:  config.GroupSettings{SessionTimeout: policy.PD(3 * time.Second), HeartbeatInterval: policy.PD(300 * time.Millisecond)},
		Listen: config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled},
	}
	stopKafka, err := startKafka(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stopKafka()

	var mu sync.Mutex
	var fates []string
	all, closed := make(chan struct{}), false
	loop, err := retryloop.NewBatch(cfg, func(ctx context.Context, records []*kgo.Record) []error {
		errs := make([]error, len(records))
		mu.Lock()
		defer mu.Unlock()
		for i, r := range records {
			info, _ := retryloop.BatchInfo(ctx, i)
			switch {
			case string(r.Key) == "row-2" && info.Attempt == 1:
				errs[i] = errors.New("deadlock, try again")
			case string(r.Key) == "row-3":
				errs[i] = retryloop.Permanent(errInvalid)
			}
			fate := "saved"
			if errs[i] != nil {
				fate = "failed: " + errs[i].Error()
			}
			fates = append(fates, fmt.Sprintf("%s attempt %d: %s", r.Key, info.Attempt, fate))
		}
		if len(fates) >= 4 && !closed {
			close(all)
			closed = true
		}
		return errs
	}, retryloop.WithoutHTTP(), retryloop.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.BootstrapServers...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	var rows []*kgo.Record
	for _, k := range []string{"row-1", "row-2", "row-3"} {
		rows = append(rows, &kgo.Record{Topic: "rows", Key: []byte(k), Value: []byte(`{}`)})
	}
	if err := cl.ProduceSync(context.Background(), rows...).FirstErr(); err != nil {
		fmt.Println(err)
		return
	}
	<-all
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(fates)
	for _, f := range fates {
		fmt.Println(f)
	}
	// Output:
	// row-1 attempt 1: saved
	// row-2 attempt 1: failed: deadlock, try again
	// row-2 attempt 2: saved
	// row-3 attempt 1: failed: invalid row
}
