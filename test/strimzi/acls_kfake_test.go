package strimzi_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestKafkaUsersDoWhatTheCodeSendsOnABrokerThatEnforcesACLs creates the two KafkaUsers' ACLs (for
// namespace team-a) on kfake with ACLs enforced and sends, as each user, the requests the manager and
// the dispatcher send: the manager creates, grows, configures, describes, produces to (idempotent),
// scans, trims and deletes topics and fetches a group's offsets, but cannot join a group; the
// consumers join their group, read, commit, and write a retry tier and the dead-letter topic, but not
// the record of decisions.
func TestKafkaUsersDoWhatTheCodeSendsOnABrokerThatEnforcesACLs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	op := kafkaUser(t, operatorUserFile, "team-a")
	cons := kafkaUser(t, consumerUserFile, "team-a")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-512", "admin", "a"),
		kfake.User("SCRAM-SHA-512", op.GetName(), "o"), kfake.User("SCRAM-SHA-512", cons.GetName(), "c"))
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	cl := func(u, p string, o ...kgo.Opt) *kgo.Client {
		x, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryTimeout(2 * time.Second), kgo.SASL(scram.Auth{User: u, Pass: p}.AsSha512Mechanism())}, o...)...)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(x.Close)
		return x
	}
	admin := kadm.NewClient(cl("admin", "a"))
	for _, u := range []struct {
		name string
		list []acl
	}{{op.GetName(), acls(t, op)}, {cons.GetName(), acls(t, cons)}} {
		for _, a := range u.list {
			b := kadm.NewACLs()
			if a.deny {
				b.Deny("User:" + u.name).DenyHosts("*")
			} else {
				b.Allow("User:" + u.name).AllowHosts("*")
			}
			pt := kadm.ACLPatternLiteral
			if a.prefix {
				pt = kadm.ACLPatternPrefixed
			}
			switch a.resType {
			case "topic":
				b.Topics(a.resource)
			case "group":
				b.Groups(a.resource)
			}
			b.ResourcePatternType(pt)
			var ops []kadm.ACLOperation
			for _, o := range a.ops {
				v, err := kmsg.ParseACLOperation(map[string]string{"Read": "read", "Write": "write", "Create": "create", "Delete": "delete", "Alter": "alter", "Describe": "describe", "DescribeConfigs": "describe_configs", "AlterConfigs": "alter_configs"}[o])
				g.Expect(err).NotTo(HaveOccurred(), o)
				ops = append(ops, v)
			}
			b.Operations(ops...)
			res, err := admin.CreateACLs(ctx, b)
			g.Expect(err).NotTo(HaveOccurred())
			for _, r := range res {
				g.Expect(r.Err).NotTo(HaveOccurred())
			}
		}
	}
	oc := cl(op.GetName(), "o")
	oa := kadm.NewClient(oc)
	for _, tp := range []string{"team-a.src", "team-a.src.retry.1", "team-a.chatbot.dlq", "team-a.chatbot.dlq.state"} {
		_, err := oa.CreateTopic(ctx, 1, 1, nil, tp)
		g.Expect(err).NotTo(HaveOccurred(), tp)
	}
	cp, err := oa.CreatePartitions(ctx, 2, "team-a.src")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cp.Error()).NotTo(HaveOccurred())
	ac, err := oa.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("100000")}}, "team-a.chatbot.dlq")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ac[0].Err).NotTo(HaveOccurred())
	rc, err := oa.DescribeTopicConfigs(ctx, "team-a.chatbot.dlq")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rc[0].Err).NotTo(HaveOccurred())
	g.Expect(oc.ProduceSync(ctx, &kgo.Record{Topic: "team-a.chatbot.dlq.state", Value: []byte("d")}, &kgo.Record{Topic: "team-a.src", Value: []byte("r")}).FirstErr()).To(Succeed())

	// The consumers: join the group, read the source, commit, write a tier and the dead-letter topic.
	cc := cl(cons.GetName(), "c", kgo.ConsumerGroup("team-a.src"), kgo.ConsumeTopics("team-a.src", "team-a.src.retry.1"), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got int
	for got == 0 {
		f := cc.PollFetches(ctx)
		g.Expect(f.Errors()).To(BeEmpty())
		got += f.NumRecords()
	}
	g.Expect(cc.CommitUncommittedOffsets(ctx)).To(Succeed())
	g.Expect(cc.ProduceSync(ctx, &kgo.Record{Topic: "team-a.src.retry.1", Value: []byte("t")}, &kgo.Record{Topic: "team-a.chatbot.dlq", Value: []byte("x")}).FirstErr()).To(Succeed())
	g.Expect(cc.ProduceSync(ctx, &kgo.Record{Topic: "team-a.chatbot.dlq.state", Value: []byte("x")}).FirstErr()).To(HaveOccurred())

	// The manager: a group's offsets and the topics' (lag, counts), a scan, DeleteRecords, DeleteTopics.
	fo := oa.FetchManyOffsets(ctx, "team-a.src")
	g.Expect(fo["team-a.src"].Err).NotTo(HaveOccurred())
	g.Expect(fo["team-a.src"].Fetched).NotTo(BeEmpty())
	ends, err := oa.ListEndOffsets(ctx, "team-a.chatbot.dlq", "team-a.src")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ends.Error()).NotTo(HaveOccurred())
	sc := cl(op.GetName(), "o", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"team-a.chatbot.dlq": {0: kgo.NewOffset().AtStart()}}))
	f := sc.PollFetches(ctx)
	g.Expect(f.Errors()).To(BeEmpty())
	g.Expect(f.NumRecords()).To(BeNumerically(">", 0))
	os := make(kadm.Offsets)
	os.Add(kadm.Offset{Topic: "team-a.chatbot.dlq", Partition: 0, At: 1, LeaderEpoch: -1})
	dr, err := oa.DeleteRecords(ctx, os)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dr.Error()).NotTo(HaveOccurred())
	_, err = oa.DeleteTopic(ctx, "team-a.src.retry.1")
	g.Expect(err).NotTo(HaveOccurred())
	// The manager cannot consume as a pipeline: no commit to a group (OffsetCommit needs group Read).
	commit := make(kadm.Offsets)
	commit.Add(kadm.Offset{Topic: "team-a.src", Partition: 0, At: 0, LeaderEpoch: -1})
	committed, err := oa.CommitOffsets(ctx, "team-a.src", commit)
	if err == nil {
		err = committed.Error()
	}
	g.Expect(err).To(MatchError(kerr.GroupAuthorizationFailed))
}
