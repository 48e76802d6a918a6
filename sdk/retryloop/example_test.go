package retryloop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// A handler processes one record; its error goes through the pipeline's policy. Here a record
// whose first attempt fails is retried from the retry tier and succeeds, and one the handler can
// never process is dead-lettered at once, with the why in its headers.
//
// In a pod the operator runs, the configuration comes from the operator (retryloop.New(nil, h)
// reads it); here it is built in Go, and an in-process Kafka (kfake) stands for the cluster.
func ExampleNew() {
	cfg := &retryloop.Config{
		Pipeline: config.Pipeline{Namespace: "shop", Name: "orders"},
		Topics:   config.Topics{Source: "orders", DeadLetter: "orders.dlq"},
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

	events := make(chan string, 10)
	loop, err := retryloop.New(cfg, func(ctx context.Context, r *kgo.Record) error {
		info, _ := retryloop.Info(ctx)
		switch string(r.Key) {
		case "order-1":
			if info.Attempt == 1 {
				events <- "order-1: attempt 1 failed"
				return errors.New("inventory unavailable") // the policy's defaultAction: Retry
			}
			events <- fmt.Sprintf("order-1: attempt %d succeeded", info.Attempt)
		case "order-2":
			return retryloop.Permanent(errors.New("order-2 has no items"))
		}
		return nil
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

	// A failsafe: the example ends well before it.
	wait, cancelWait := context.WithTimeout(context.Background(), time.Minute)
	defer cancelWait()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.BootstrapServers...),
		kgo.ConsumeTopics(cfg.Topics.DeadLetter), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	if err := cl.ProduceSync(wait,
		&kgo.Record{Topic: "orders", Key: []byte("order-1"), Value: []byte(`{"sku":"A1"}`)},
		&kgo.Record{Topic: "orders", Key: []byte("order-2"), Value: []byte(`{}`)},
	).FirstErr(); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		fmt.Println(<-events)
	}
	for dead := cl.PollRecords(wait, 1).Records(); len(dead) > 0; dead = nil {
		fmt.Printf("%s: dead-lettered, %s=%s %s=%s %s=%q\n", dead[0].Key,
			headers.Reason, header(dead[0], headers.Reason), headers.Attempts, header(dead[0], headers.Attempts),
			headers.ErrorMessage, header(dead[0], headers.ErrorMessage))
	}
	// Output:
	// order-1: attempt 1 failed
	// order-1: attempt 2 succeeded
	// order-2: dead-lettered, retryops.reason=non_retriable_error retryops.attempts=1 retryops.error.message="order-2 has no items"
}

// startKafka starts an in-process Kafka holding cfg's topics (the source, the retry tiers the policy
// gives and the dead letter topic) and points cfg at it.
func startKafka(cfg *retryloop.Config) (stop func(), err error) {
	cfg.Default()
	topics := append(cfg.Topics.Retries.Names(), cfg.Topics.Source, cfg.Topics.DeadLetter)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.SeedTopics(1, topics...))
	if err != nil {
		return nil, err
	}
	cfg.Kafka.BootstrapServers = c.ListenAddrs()
	return c.Close, nil
}

// header is the value of the record's header key.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
