package kafkastats

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// TestTopicsNeverShareASnapshotAcrossCredentials: two tenants reach the same brokers with different
// SASL users; the ACLs let one describe a topic the other may not (its admin does not see it). The
// one denied, settled, never reads the description the other's round took.
func TestTopicsNeverShareASnapshotAcrossCredentials(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	conn := func(user string) kafka.Connection {
		return kafka.Connection{BootstrapServers: []string{"broker:9092"}, SASL: &kafka.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: user, Password: "pw-" + user}}
	}
	allowed, denied := conn("team-a").Key(), conn("team-b").Key()
	g.Expect(allowed).NotTo(Equal(denied))
	seesIt, doesNot := kafkafake.New(), kafkafake.New()
	seesIt.AddTopic("team-a.secret", 3, 1, map[string]string{"retention.ms": "1000"})
	topics := NewTopics(clk)
	const interval = time.Minute
	got, err := topics.Describe(ctx, seesIt, allowed, "DeadLetterQueue/a/q", []string{"team-a.secret"}, interval, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got["team-a.secret"].Exists).To(BeTrue())

	got, err = topics.Describe(ctx, doesNot, denied, "DeadLetterQueue/b/q", []string{"team-a.secret"}, interval, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got["team-a.secret"].Exists).To(BeFalse(), "read with team-b's credentials")
	g.Expect(doesNot.CallCount(kafkafake.DescribeTopics)).To(Equal(1))
	g.Expect(seesIt.CallCount(kafkafake.DescribeTopics)).To(Equal(1), "team-b's read never went through team-a's client")
}
