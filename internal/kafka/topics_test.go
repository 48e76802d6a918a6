package kafka_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

func TestPlanTopic(t *testing.T) {
	want := kafka.TopicSpec{Name: "t", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"compression.type": "zstd", "retention.ms": "3600000"}}
	exists := func(partitions int32, configs map[string]string) kafka.TopicInfo {
		return kafka.TopicInfo{Name: "t", Exists: true, Partitions: partitions, Configs: configs}
	}
	for name, tc := range map[string]struct {
		have kafka.TopicInfo
		want kafka.TopicPlan
		text string
	}{
		"missing topic is created": {
			have: kafka.TopicInfo{Name: "t"}, want: kafka.TopicPlan{Create: true}, text: "created with 3 partitions",
		},
		"as specified: nothing to do, other configs left alone": {
			have: exists(3, map[string]string{"compression.type": "zstd", "retention.ms": "3600000", "cleanup.policy": "delete"}),
			want: kafka.TopicPlan{},
		},
		"config drift is set back": {
			have: exists(3, map[string]string{"compression.type": "gzip"}),
			want: kafka.TopicPlan{SetConfigs: map[string]string{"compression.type": "zstd", "retention.ms": "3600000"}},
			text: "config set back: compression.type=zstd (was gzip), retention.ms=3600000 (was unset)",
		},
		"fewer partitions are grown": {
			have: exists(1, want.Configs), want: kafka.TopicPlan{GrowTo: 3}, text: "grown from 1 to 3 partitions",
		},
		"more partitions are reported, never shrunk": {
			have: exists(5, want.Configs), want: kafka.TopicPlan{ShrinkFrom: 5},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := kafka.PlanTopic(want, tc.have)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(got.Describe(want, tc.have)).To(Equal(tc.text))
			g.Expect(got.Empty()).To(Equal(tc.text == ""))
		})
	}
}

func TestApplyPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := kafkafake.New()
	want := kafka.TopicSpec{Name: "t", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"compression.type": "zstd"}}

	now, err := kafka.ApplyPlan(ctx, f, want, kafka.TopicInfo{Name: "t"}, kafka.TopicPlan{Create: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.Partitions).To(Equal(int32(3)))
	g.Expect(f.Topic("t").Configs).To(HaveKeyWithValue("compression.type", "zstd"))

	g.Expect(f.AlterTopicConfigs(ctx, "t", map[string]string{"compression.type": "gzip"})).To(Succeed())
	want.Partitions = 5
	have := f.Topic("t")
	plan := kafka.PlanTopic(want, have)
	now, err = kafka.ApplyPlan(ctx, f, want, have, plan)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.Partitions).To(Equal(int32(5)))
	g.Expect(f.Topic("t").Partitions).To(Equal(int32(5)))
	g.Expect(f.Topic("t").Configs).To(HaveKeyWithValue("compression.type", "zstd"))
	g.Expect(now.Configs).To(HaveKeyWithValue("compression.type", "zstd"))

	_, err = kafka.ApplyPlan(ctx, f, want, kafka.TopicInfo{Name: "t"}, kafka.TopicPlan{Create: true})
	g.Expect(errors.Is(err, kafka.ErrTopicExists)).To(BeTrue())
}
