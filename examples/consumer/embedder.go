package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/retryloop"
)

// Document is a record of the documents pipeline's source topic.
type Document struct {
	// ID identifies the document; required.
	ID string `json:"id"`
	// Text is what is embedded.
	Text string `json:"text"`
	// FailFirst makes the first FailFirst attempts fail as an unavailable embedding service would:
	// a way for demos and tests to show a retry.
	FailFirst int32 `json:"failFirst,omitempty"`
}

// Index stores a document's embedding. Put is called again for a document delivered again (a
// retry after a failure that came after Put, a replay of a dead letter): it must be an upsert.
type Index interface {
	Put(ctx context.Context, id string, vector []float32) error
}

// LogIndex is an Index that logs what it would store.
type LogIndex struct{ Log *slog.Logger }

// Put logs the embedding.
func (l *LogIndex) Put(ctx context.Context, id string, vector []float32) error {
	info, _ := retryloop.Info(ctx)
	l.Log.Info("Embedded document", "id", id, "dimensions", len(vector), "attempt", info.Attempt)
	return nil
}

// ErrEmbeddingUnavailable is the embedding service failing for a while.
var ErrEmbeddingUnavailable = errors.New("embedding service unavailable")

// Embedder is the documents pipeline's handler.
type Embedder struct{ Index Index }

// Handle embeds one document and stores it. Its errors are classified by the pipeline's policy:
// a malformed record is Permanent (a retry would not mend it), an unavailable service a plain
// error (the policy decides; the documents policy retries it).
func (e *Embedder) Handle(ctx context.Context, r *kgo.Record) error {
	var doc Document
	if err := json.Unmarshal(r.Value, &doc); err != nil {
		return retryloop.Permanent(fmt.Errorf("malformed document: %w", err))
	}
	if doc.ID == "" {
		return retryloop.Permanent(errors.New("malformed document: no id"))
	}
	if info, _ := retryloop.Info(ctx); info.Attempt <= doc.FailFirst {
		return fmt.Errorf("embedding document %s: %w", doc.ID, ErrEmbeddingUnavailable)
	}
	return e.Index.Put(ctx, doc.ID, embed(doc.Text))
}

// embed stands for a call to an embedding model: a vector of 8 dimensions from the words' hashes.
func embed(text string) []float32 {
	v := make([]float32, 8)
	for _, w := range strings.Fields(strings.ToLower(text)) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		v[h.Sum32()%8]++
	}
	return v
}
