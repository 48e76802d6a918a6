package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/devenv"
)

// The demo's library-mode pipeline: documents runs the image of examples/consumer, which the
// runner runs as bin/example-consumer (built by hack/run-local.sh), and gets a few documents every
// documentsEvery, so that its retries and dead letters show beside the dispatcher's.
const (
	// exampleConsumerImage is config/samples' documents image without its tag (examples/Dockerfile).
	exampleConsumerImage = "ghcr.io/retryops/retry-operator-example-consumer"
	// exampleConsumerProgram is its program in bin/.
	exampleConsumerProgram = "example-consumer"
	documentsTopic         = demoNamespace + ".documents.chunks"
	documentsEvery         = time.Minute
)

// documentsPolicyPatch shortens the documents policy's delays (10m to 60m, seed 003's) to seconds,
// so that the demo shows its retries: 5s, 10s, 20s, 20s before attempts 2 to 5.
const documentsPolicyPatch = `- target: {kind: RetryPolicy, name: documents}
  patch: |-
    - op: replace
      path: /spec/backoff
      value: {initialDelay: 5s, multiplier: "2", maxDelay: 20s, jitter: {mode: None}}
`

// demoDocuments are one round of documents (round): one embedded at once, one whose first two
// attempts fail (embedded at its third), one malformed (dead-lettered at once, non_retriable_error)
// and one that fails past the policy's 5 attempts (max_retries_exceeded).
func demoDocuments(round int) []*kgo.Record {
	docs := []string{
		`{"id":"doc-%d-1","text":"How do I reset my password?"}`,
		`{"id":"doc-%d-2","text":"Refunds take five working days.","failFirst":2}`,
		`{"id":"doc-%d-3","text":`,
		`{"id":"doc-%d-4","text":"The embedding service never answers for this one.","failFirst":9}`,
	}
	out := make([]*kgo.Record, len(docs))
	for i, d := range docs {
		out[i] = &kgo.Record{Topic: documentsTopic, Key: fmt.Appendf(nil, "doc-%d-%d", round, i+1), Value: fmt.Appendf(nil, d, round)}
	}
	return out
}

// produceDocuments writes a round of demoDocuments once the documents pipeline has its source
// topic, then another every documentsEvery, until ctx ends; produced counts the rounds written.
func produceDocuments(ctx context.Context, stack *devenv.Stack, produced *atomic.Int32) {
	if !awaitSourceTopic(ctx, stack, "documents") {
		return
	}
	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev: documents producer:", err)
		return
	}
	defer cl.Close()
	for round := 1; ctx.Err() == nil; round++ {
		if err := cl.ProduceSync(ctx, demoDocuments(round)...).FirstErr(); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "dev: documents producer:", err)
		} else if err == nil {
			produced.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(documentsEvery):
		}
	}
}

// documentsLine is the live view's line for the documents pipeline, rounds rounds produced.
func documentsLine(rounds int32) string {
	return fmt.Sprintf("documents (library mode, bin/%s): %d rounds of %d documents produced; its dead letters: "+
		"kubectl get deadletters -n %s --field-selector pipeline=%s/documents", exampleConsumerProgram, rounds, len(demoDocuments(0)), demoNamespace, demoNamespace)
}
