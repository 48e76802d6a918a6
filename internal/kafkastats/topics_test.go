package kafkastats

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// TestTopicsDescribeEveryTopicOfAConnectionOnceAnInterval: settled members read one describe of all
// their topics per interval; an unsettled member (or one whose reconcile failed) describes fresh
// and what it read, or what it changed, is what the settled ones read next.
func TestTopicsDescribeEveryTopicOfAConnectionOnceAnInterval(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	fake := kafkafake.New()
	const members, interval = 50, 30 * time.Second
	name := func(i int) string { return fmt.Sprintf("t%02d", i) }
	member := func(i int) string { return "DeadLetterQueue/ns/" + name(i) }
	for i := range members {
		fake.AddTopic(name(i), 3, 1, map[string]string{"retention.ms": "1000"})
	}
	topics := NewTopics(clk)
	describe := func(i int, settled bool) map[string]kafka.TopicInfo {
		got, err := topics.Describe(ctx, fake, "conn", member(i), []string{name(i)}, interval, settled)
		g.Expect(err).NotTo(HaveOccurred())
		return got
	}
	for i := range members {
		describe(i, false)
	}
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(Equal(members), "each new member describes its own topics")

	fake.ResetCalls()
	clk.SetTime(clk.Now().Add(interval))
	for i := range members {
		g.Expect(describe(i, true)[name(i)]).To(HaveField("Partitions", int32(3)))
	}
	calls := fake.CallsTo(kafkafake.DescribeTopics)
	g.Expect(calls).To(HaveLen(1), "one describe of the connection for every settled member")
	g.Expect(calls[0].Args).To(ConsistOf(HaveLen(members)))

	// Drift out of band shows at the next round, not before.
	fake.AddTopic(name(1), 3, 1, map[string]string{"retention.ms": "5"})
	g.Expect(describe(1, true)[name(1)].Configs).To(HaveKeyWithValue("retention.ms", "1000"))
	clk.SetTime(clk.Now().Add(interval))
	g.Expect(describe(1, true)[name(1)].Configs).To(HaveKeyWithValue("retention.ms", "5"))

	// A changing member reads fresh, and puts what it read in the snapshot.
	fake.ResetCalls()
	fake.AddTopic(name(2), 6, 1, nil)
	g.Expect(describe(2, false)[name(2)].Partitions).To(Equal(int32(6)))
	g.Expect(describe(2, true)[name(2)].Partitions).To(Equal(int32(6)))
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(Equal(1))

	// What a member changed is what the readers after it see; a created topic is described alone.
	changed := describe(3, true)[name(3)]
	changed.Configs["retention.ms"] = "7"
	topics.Set("conn", changed)
	g.Expect(describe(3, true)[name(3)].Configs).To(HaveKeyWithValue("retention.ms", "7"))
	topics.Drop("conn", name(4))
	fake.ResetCalls()
	describe(4, true)
	g.Expect(fake.CallsTo(kafkafake.DescribeTopics)).To(ConsistOf(HaveField("Args", ConsistOf(ConsistOf(name(4))))))

	// A failed reconcile makes the next describe fresh, once.
	topics.Unsettle(member(5))
	fake.ResetCalls()
	describe(5, true)
	describe(5, true)
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(Equal(1))
}

// blockingAdmin holds DescribeTopics until release is closed, having said so on started.
type blockingAdmin struct {
	*kafkafake.Fake
	started, release chan struct{}
}

func (b blockingAdmin) DescribeTopics(ctx context.Context, names ...string) (map[string]kafka.TopicInfo, error) {
	got, err := b.Fake.DescribeTopics(ctx, names...)
	b.started <- struct{}{}
	<-b.release
	return got, err
}

// TestTopicsRoundKeepsWhatWasSetMeanwhile: a round that read a topic before this operator changed
// it must not put the old description back.
func TestTopicsRoundKeepsWhatWasSetMeanwhile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	fake := kafkafake.New()
	fake.AddTopic("a", 1, 1, map[string]string{"retention.ms": "1"})
	fake.AddTopic("b", 1, 1, nil)
	topics := NewTopics(clk)
	for _, n := range []string{"a", "b"} {
		_, err := topics.Describe(ctx, fake, "conn", n, []string{n}, time.Minute, false)
		g.Expect(err).NotTo(HaveOccurred())
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	slow := blockingAdmin{Fake: fake, started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error)
	go func() {
		_, err := topics.Get(ctx, slow, "conn", "b", []string{"b"}, time.Minute)
		done <- err
	}()
	<-slow.started
	topics.Set("conn", kafka.TopicInfo{Name: "a", Exists: true, Partitions: 1, Configs: map[string]string{"retention.ms": "2"}})
	topics.Drop("conn", "b")
	close(slow.release)
	g.Expect(<-done).To(Succeed())

	fake.ResetCalls()
	got, err := topics.Get(ctx, fake, "conn", "a", []string{"a"}, time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got["a"].Configs).To(HaveKeyWithValue("retention.ms", "2"))
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(BeZero())
	_, err = topics.Get(ctx, fake, "conn", "b", []string{"b"}, time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(Equal(1), "a dropped topic is described again")
}

// TestTopicsFreshReadFailureKeepsTheMemberUnsettled: the failed fresh read leaves the next one
// fresh too.
func TestTopicsFreshReadFailureKeepsTheMemberUnsettled(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	fake := kafkafake.New()
	fake.AddTopic("a", 1, 1, nil)
	topics := NewTopics(clocktesting.NewFakePassiveClock(liveNow))
	_, err := topics.Describe(ctx, fake, "conn", "m", []string{"a"}, time.Minute, false)
	g.Expect(err).NotTo(HaveOccurred())
	topics.Unsettle("m")
	fake.FailNext(kafkafake.DescribeTopics, errors.New("broker gone"))
	_, err = topics.Describe(ctx, fake, "conn", "m", []string{"a"}, time.Minute, true)
	g.Expect(err).To(HaveOccurred())
	fake.ResetCalls()
	_, err = topics.Describe(ctx, fake, "conn", "m", []string{"a"}, time.Minute, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.CallCount(kafkafake.DescribeTopics)).To(Equal(1))
}

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
