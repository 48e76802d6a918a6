package devenv

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestTheStrimziACLsAreEnforcedOnTheBroker: the ACLs of config/strimzi's KafkaUsers, created as the
// stack creates them, let a namespace's consumers write their own namespace's topics and nothing
// else, and let the operator create any topic.
func TestTheStrimziACLsAreEnforcedOnTheBroker(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	consumer, err := readKafkaUser(consumerKafkaUserFile, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(consumer.Metadata.Name).To(Equal(ConsumerSecretName("team-a")))
	operator, err := readKafkaUser(operatorKafkaUserFile, "")
	g.Expect(err).NotTo(HaveOccurred())

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-512", "admin", "admin-pass"),
		kfake.User("SCRAM-SHA-512", consumer.Metadata.Name, "consumer-pass"),
		kfake.User("SCRAM-SHA-512", operator.Metadata.Name, "operator-pass"))
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	client := func(user, pass string, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryTimeout(2 * time.Second),
			kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, opts...)...)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(cl.Close)
		return cl
	}
	admin := kadm.NewClient(client("admin", "admin-pass"))
	g.Expect(createACLs(ctx, admin, consumer)).To(Succeed())
	g.Expect(createACLs(ctx, admin, operator)).To(Succeed())

	_, err = kadm.NewClient(client(operator.Metadata.Name, "operator-pass")).CreateTopics(ctx, 1, 1, nil, "team-a.orders", "team-b.orders")
	g.Expect(err).NotTo(HaveOccurred())
	consumerClient := client(consumer.Metadata.Name, "consumer-pass")
	g.Expect(consumerClient.ProduceSync(ctx, &kgo.Record{Topic: "team-a.orders", Value: []byte("x")}).FirstErr()).To(Succeed())
	g.Expect(consumerClient.ProduceSync(ctx, &kgo.Record{Topic: "team-b.orders", Value: []byte("x")}).FirstErr()).
		To(MatchError(kerr.TopicAuthorizationFailed))
	_, err = kadm.NewClient(consumerClient).CreateTopic(ctx, 1, 1, nil, "team-a.new")
	g.Expect(err).To(HaveOccurred(), "a namespace's consumers create no topic")
}
