package kafkafake

import (
	"context"
	"maps"
	"slices"

	"github.com/retryops/retry-operator/internal/kafka"
)

// The batched methods (kafka.BatchAdmin), each recorded as one call; an error injected for one
// (SetError, FailNext) fails every topic of the call, as a failed request does.
const (
	// DescribeTopicsEach names kafka.BatchAdmin.DescribeTopicsEach.
	DescribeTopicsEach = "DescribeTopicsEach"
	// CreateTopics names kafka.BatchAdmin.CreateTopics.
	CreateTopics = "CreateTopics"
	// AlterTopicsConfigs names kafka.BatchAdmin.AlterTopicsConfigs.
	AlterTopicsConfigs = "AlterTopicsConfigs"
	// AddPartitionsEach names kafka.BatchAdmin.AddPartitionsEach.
	AddPartitionsEach = "AddPartitionsEach"
)

var _ kafka.BatchAdmin = (*Fake)(nil)

// DescribeTopicsEach implements kafka.BatchAdmin.
func (f *Fake) DescribeTopicsEach(ctx context.Context, names []string, configs bool) map[string]kafka.TopicResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.begin(ctx, DescribeTopicsEach, slices.Clone(names), configs)
	out := make(map[string]kafka.TopicResult, len(names))
	for _, n := range names {
		if n == "" {
			continue
		}
		if err != nil {
			out[n] = kafka.TopicResult{Err: err}
			continue
		}
		info := f.describe(n)
		if !configs {
			info.Configs = nil
		}
		out[n] = kafka.TopicResult{Info: info}
	}
	return out
}

// CreateTopics implements kafka.BatchAdmin. Of a name given twice, the first is created.
func (f *Fake) CreateTopics(ctx context.Context, topics []kafka.TopicCreate) map[string]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.begin(ctx, CreateTopics, slices.Clone(topics))
	out := make(map[string]error, len(topics))
	for _, t := range topics {
		if _, seen := out[t.Name]; seen {
			continue
		}
		if err != nil {
			out[t.Name] = err
			continue
		}
		out[t.Name] = f.create(t.Name, t.Partitions, t.ReplicationFactor, t.Configs)
	}
	return out
}

// AlterTopicsConfigs implements kafka.BatchAdmin.
func (f *Fake) AlterTopicsConfigs(ctx context.Context, set map[string]map[string]string) map[string]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.begin(ctx, AlterTopicsConfigs, maps.Clone(set))
	out := make(map[string]error, len(set))
	for _, n := range slices.Sorted(maps.Keys(set)) {
		if err != nil {
			out[n] = err
			continue
		}
		out[n] = f.alter(n, set[n])
	}
	return out
}

// AddPartitionsEach implements kafka.BatchAdmin.
func (f *Fake) AddPartitionsEach(ctx context.Context, totals map[string]int32) map[string]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.begin(ctx, AddPartitionsEach, maps.Clone(totals))
	out := make(map[string]error, len(totals))
	for _, n := range slices.Sorted(maps.Keys(totals)) {
		if err != nil {
			out[n] = err
			continue
		}
		out[n] = f.grow(n, totals[n])
	}
	return out
}
