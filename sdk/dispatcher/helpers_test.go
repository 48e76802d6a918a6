package dispatcher_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/policy"
)

// received waits (gomega's Eventually) for a value on ch and returns it.
func received[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	var v T
	gomega.NewWithT(t).Eventually(ch).WithTimeout(20*time.Second).Should(gomega.Receive(&v), what)
	return v
}

// closed waits (gomega's Eventually) until ch is closed.
func closed[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	gomega.NewWithT(t).Eventually(ch).WithTimeout(20*time.Second).Should(gomega.BeClosed(), what)
}

// running is an engine running in the background.
type running struct {
	e       *dispatcher.Engine
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// stop cancels the engine and waits for Run to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("the engine did not stop:\n%s", buf[:runtime.Stack(buf, true)])
	}
}

// start runs an engine for the test; prep, if any, is called on it before Run.
func start(t testing.TB, o dispatcher.Options, prep ...func(*dispatcher.Engine)) *running {
	t.Helper()
	if o.Handler == nil && o.Config.Sink != nil {
		var opts []dispatcher.HTTPSinkOption
		if o.Clock != nil {
			opts = append(opts, dispatcher.WithSinkClock(o.Clock))
		}
		o.Handler = dispatcher.NewHTTPSink(o.Config.Sink.URL, int(o.Config.Delivery.MaxInFlight), opts...)
	}
	if err := o.Config.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	e, err := dispatcher.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for _, f := range prep {
		f(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// pipeline is a cluster, a sink and a config wired together.
type pipeline struct {
	c    *kfake.Cluster
	sink *dt.Sink
	cfg  *config.Config
	prod *kgo.Client
}

func newPipeline(t testing.TB, group string, partitions int32, pol *policy.Spec, behavior func(*dt.Request) dt.Response, opts ...dt.SinkOption) *pipeline {
	t.Helper()
	src, dlq := group+".src", group+".dlq"
	sink := dt.NewSink(t, behavior, opts...)
	// Build the config first to learn the tier names, then seed every topic.
	probe := dt.Config(nil, group, src, dlq, pol, sink.URL)
	topics := map[string]int32{src: partitions, dlq: 1}
	for _, n := range probe.Topics.Retries.Names() {
		topics[n] = partitions
	}
	c := dt.Cluster(t, topics)
	cfg := dt.Config(c.ListenAddrs(), group, src, dlq, pol, sink.URL)
	return &pipeline{c: c, sink: sink, cfg: cfg, prod: dt.Client(t, c)}
}

// committed returns the offset the pipeline's group committed for a partition (-1 for none).
func (p *pipeline) committed(t testing.TB, topic string, partition int32) int64 {
	t.Helper()
	os, err := kadm.NewClient(p.prod).FetchOffsets(context.Background(), p.cfg.ConsumerGroup)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return -1 // the group has not committed yet
	}
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := os.Lookup(topic, partition); ok {
		return o.At
	}
	return -1
}

// endOffset returns the end offset of a partition of the pipeline's cluster: how many records it
// holds.
func endOffset(t testing.TB, p *pipeline, topic string, partition int32) int64 {
	t.Helper()
	eo, err := kadm.NewClient(p.prod).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := eo.Lookup(topic, partition)
	if !ok || o.Err != nil {
		t.Fatalf("end offset of %s/%d: %v", topic, partition, o.Err)
	}
	return o.Offset
}

// topicRecords returns how many records a topic of the pipeline's cluster holds, in all its
// partitions.
func topicRecords(t testing.TB, p *pipeline, topic string) int64 {
	t.Helper()
	eo, err := kadm.NewClient(p.prod).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	eo.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// allRecords reads every record a topic of the pipeline's cluster holds (as many as its end
// offsets say), so that "none" is known, not a read that found nothing in time.
func allRecords(t testing.TB, p *pipeline, topic string) []*kgo.Record {
	t.Helper()
	return dt.ReadTopic(t, p.c, topic, int(topicRecords(t, p, topic)), 20*time.Second)
}

// topicID returns the ID of a topic of the pipeline's cluster.
func topicID(t testing.TB, p *pipeline, topic string) [16]byte {
	t.Helper()
	td, err := kadm.NewClient(p.prod).ListTopics(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return [16]byte(td[topic].ID)
}

// rejectProduce answers a produce request with err for every partition it writes (a kfake
// ControlKey response: nothing is appended).
func rejectProduce(req *kmsg.ProduceRequest, err *kerr.Error) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = err.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// onlyDeadLetter produces hostile and, behind it, an ordinary record (key "behind") to the source,
// and returns the one dead letter the dispatcher writes (failing unless there is exactly one).
func (p *pipeline) onlyDeadLetter(t *testing.T, hostile *kgo.Record) *kgo.Record {
	t.Helper()
	hostile.Topic = p.cfg.Topics.Source
	dt.Produce(t, p.prod, hostile, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("behind"), Value: []byte("behind")})
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dl))
	}
	return dl[0]
}
