package kafkaspec

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// Clusters.Same: the same servers at once, without Kafka; other servers by the cluster IDs of both
// connections, read again when they differ; a connection whose ID cannot be read counts as on the
// cluster, with the reason.
func TestClustersAreTheirIDsNotTheirSpellings(t *testing.T) {
	ctx := context.Background()
	f := kafkafake.New()
	d := Defaults{BootstrapServers: []string{"127.0.0.1:9092"}}
	cs := Clusters{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), Defaults: d, Registry: kafka.NewRegistry(f)}
	party := func(name string, servers ...string) *Party {
		var spec *v1.KafkaConnection
		if len(servers) > 0 {
			spec = &v1.KafkaConnection{BootstrapServers: servers}
		}
		return &Party{Owner: "ConsumerPipeline/ns/" + name, Namespace: "ns", Kafka: spec}
	}
	same := func(a, b *Party) (bool, error) { return cs.Same(ctx, a, b) }
	g := NewWithT(t)

	g.Expect(same(party("a"), party("b", "127.0.0.1:9092 "))).To(BeTrue(), "the default connection spelled as it is")
	g.Expect(f.CallCount(kafkafake.ClusterID)).To(BeZero(), "the same servers ask Kafka nothing")

	g.Expect(same(party("a"), party("b", "localhost:9092"))).To(BeTrue(), "one cluster ID")
	g.Expect(f.CallCount(kafkafake.ClusterID)).To(Equal(2))
	g.Expect(f.CallCount(kafkafake.Ping)).To(BeZero(), "equal IDs are not read again")

	f.SetClusterID("elsewhere", "kafka.other:9092")
	f.ResetCalls()
	g.Expect(same(party("a"), party("c", "kafka.other:9092"))).To(BeFalse(), "another cluster")
	g.Expect(f.CallCount(kafkafake.Ping)).To(Equal(2), "IDs that differ are read again before they count")

	f.FailNext(kafkafake.ClusterID, nil, &kafka.Error{Kind: kafka.KindUnreachable, Op: "cluster id"})
	s, err := same(party("a"), party("d", "localhost:9092"))
	g.Expect(s).To(BeTrue(), "a cluster that cannot be told keeps its claim")
	g.Expect(err).To(MatchError(ContainSubstring("ConsumerPipeline/ns/d")))

	missing := party("e", "localhost:9092")
	missing.Kafka.SASL = &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: "gone"}}
	s, err = same(party("a"), missing)
	g.Expect(s).To(BeTrue())
	var specErr *Error
	g.Expect(errors.As(err, &specErr)).To(BeTrue(), "the connection does not resolve: %v", err)
}

// A resource compared with older claimants on several other clusters reads its own cluster ID
// again once, not once per claimant: a reconcile's Metadata requests grow with the claimants, one
// each, and its own cluster is asked once.
func TestClustersReadTheirOwnIDAgainOncePerComparisonRound(t *testing.T) {
	ctx := context.Background()
	f := kafkafake.New()
	cs := Clusters{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), Registry: kafka.NewRegistry(f)}
	party := func(name, server string) *Party {
		return &Party{Owner: "ConsumerPipeline/ns/" + name, Namespace: "ns", Kafka: &v1.KafkaConnection{BootstrapServers: []string{server}}}
	}
	g := NewWithT(t)
	self := party("self", "kafka.self:9092")
	f.SetClusterID("self", "kafka.self:9092")
	for _, o := range []string{"a", "b", "c", "d"} {
		f.SetClusterID("cluster-"+o, "kafka."+o+":9092")
		g.Expect(cs.Same(ctx, self, party(o, "kafka."+o+":9092"))).To(BeFalse())
	}
	g.Expect(f.CallCount(kafkafake.Ping)).To(Equal(5), "one Metadata request for each of the four others, and one for the resource itself")
}
