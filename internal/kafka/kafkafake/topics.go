package kafkafake

import (
	"context"
	"fmt"
	"maps"

	"github.com/retryops/retry-operator/internal/kafka"
)

// CreateTopic implements kafka.Admin.
func (f *Fake) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, CreateTopic, name, partitions, rf, maps.Clone(configs)); err != nil {
		return err
	}
	return f.create(name, partitions, rf, configs)
}

// create is CreateTopic once the call is recorded. f.mu must be held.
func (f *Fake) create(name string, partitions int32, rf int16, configs map[string]string) error {
	if _, ok := f.topics[name]; ok {
		return brokerError(fmt.Sprintf("create topic %q", name), kafka.KindTopicExists, codeTopicExists, false, "")
	}
	if partitions == -1 {
		partitions = f.DefaultPartitions
	}
	if rf == -1 {
		rf = f.DefaultReplicationFactor
	}
	if name == "" || partitions <= 0 || rf <= 0 {
		return fmt.Errorf("kafka create topic %q: invalid name, partitions %d or replication factor %d", name, partitions, rf)
	}
	f.topics[name] = &topic{
		id:      f.newID(),
		rf:      rf,
		configs: maps.Clone(nonNil(configs)),
		start:   make([]int64, partitions),
		end:     make([]int64, partitions),
	}
	return nil
}

// AlterTopicConfigs implements kafka.Admin.
func (f *Fake) AlterTopicConfigs(ctx context.Context, name string, set map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, AlterTopicConfigs, name, maps.Clone(set)); err != nil {
		return err
	}
	return f.alter(name, set)
}

// alter is AlterTopicConfigs once the call is recorded. f.mu must be held.
func (f *Fake) alter(name string, set map[string]string) error {
	t, ok := f.topics[name]
	if !ok {
		return notFound("alter configs of topic", name)
	}
	maps.Copy(t.configs, set)
	return nil
}

// AddPartitions implements kafka.Admin.
func (f *Fake) AddPartitions(ctx context.Context, name string, total int32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, AddPartitions, name, total); err != nil {
		return err
	}
	return f.grow(name, total)
}

// grow is AddPartitions once the call is recorded. f.mu must be held.
func (f *Fake) grow(name string, total int32) error {
	t, ok := f.topics[name]
	if !ok {
		return notFound("grow topic", name)
	}
	current := int32(len(t.end))
	switch {
	case total == current:
		return nil
	case total < current:
		return brokerError(fmt.Sprintf("grow topic %q to %d partitions", name, total), kafka.KindOther, codeInvalidPartitions, false,
			fmt.Sprintf(": topic has %d partitions; Kafka cannot reduce the partition count", current))
	}
	for range total - current {
		t.start = append(t.start, 0)
		t.end = append(t.end, 0)
	}
	return nil
}
