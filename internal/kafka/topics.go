package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// TopicSpec is a topic as the operator wants it.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16 // -1: the broker's default
	// Configs are the topic configs the operator keeps in place. Configs not listed are left alone.
	Configs map[string]string
}

// TopicPlan is what must change for a topic to match its TopicSpec.
type TopicPlan struct {
	// Create is set when the topic does not exist.
	Create bool
	// GrowTo is the partition count to grow to, or 0.
	GrowTo int32
	// SetConfigs are the configs to set (incrementally).
	SetConfigs map[string]string
	// ShrinkFrom is the current partition count when it is above the wanted one (Kafka cannot
	// remove partitions), or 0.
	ShrinkFrom int32
}

// Empty reports whether nothing needs to change in Kafka.
func (p TopicPlan) Empty() bool { return !p.Create && p.GrowTo == 0 && len(p.SetConfigs) == 0 }

// PlanTopic compares a topic as described with the wanted one.
func PlanTopic(want TopicSpec, have TopicInfo) TopicPlan {
	if !have.Exists {
		return TopicPlan{Create: true}
	}
	var p TopicPlan
	switch {
	case have.Partitions < want.Partitions:
		p.GrowTo = want.Partitions
	case have.Partitions > want.Partitions:
		p.ShrinkFrom = have.Partitions
	}
	for k, v := range want.Configs {
		if cur, ok := have.Configs[k]; !ok || cur != v {
			if p.SetConfigs == nil {
				p.SetConfigs = map[string]string{}
			}
			p.SetConfigs[k] = v
		}
	}
	return p
}

// Describe says in words what the plan changes, for logs and events.
func (p TopicPlan) Describe(want TopicSpec, have TopicInfo) string {
	var parts []string
	if p.Create {
		parts = append(parts, fmt.Sprintf("created with %d partitions", want.Partitions))
	}
	if p.GrowTo > 0 {
		parts = append(parts, fmt.Sprintf("grown from %d to %d partitions", have.Partitions, p.GrowTo))
	}
	if len(p.SetConfigs) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p.SetConfigs)) {
			was, ok := have.Configs[k]
			if !ok {
				was = "unset"
			}
			kv = append(kv, fmt.Sprintf("%s=%s (was %s)", k, p.SetConfigs[k], was))
		}
		parts = append(parts, "config set back: "+strings.Join(kv, ", "))
	}
	return strings.Join(parts, "; ")
}

// ApplyPlan makes the changes of plan in Kafka and returns the topic as it now is. A topic created
// by someone else between the describe and the create yields an error matching ErrTopicExists;
// callers look again later.
func ApplyPlan(ctx context.Context, admin Admin, want TopicSpec, have TopicInfo, plan TopicPlan) (TopicInfo, error) {
	now := have
	if plan.Create {
		err := admin.CreateTopic(ctx, want.Name, want.Partitions, want.ReplicationFactor, want.Configs)
		if err != nil {
			return have, err
		}
		return TopicInfo{Name: want.Name, Exists: true, Partitions: want.Partitions, ReplicationFactor: want.ReplicationFactor,
			Configs: maps.Clone(want.Configs)}, nil
	}
	if plan.GrowTo > 0 {
		if err := admin.AddPartitions(ctx, want.Name, plan.GrowTo); err != nil {
			return have, err
		}
		now.Partitions = plan.GrowTo
	}
	if len(plan.SetConfigs) > 0 {
		if err := admin.AlterTopicConfigs(ctx, want.Name, plan.SetConfigs); err != nil {
			return now, err
		}
		now.Configs = maps.Clone(now.Configs)
		if now.Configs == nil {
			now.Configs = map[string]string{}
		}
		maps.Copy(now.Configs, plan.SetConfigs)
	}
	return now, nil
}
