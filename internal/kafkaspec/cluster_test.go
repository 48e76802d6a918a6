package kafkaspec

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// Clusters.Same: the same servers at once, without Kafka; other servers by the cluster IDs of both
// connections, read again when they differ; a claimant whose ID cannot be read (and none recorded)
// holds nothing, with the reason.
func TestClustersAreTheirIDsNotTheirSpellings(t *testing.T) {
	ctx := context.Background()
	f := kafkafake.New()
	d := Defaults{BootstrapServers: []string{"127.0.0.1:9092"}}
	cs := Clusters{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), Defaults: d, Registry: kafka.NewRegistry(f, nil)}
	party := func(name string, servers ...string) *Party {
		var spec *retryv1alpha1.KafkaConnection
		if len(servers) > 0 {
			spec = &retryv1alpha1.KafkaConnection{BootstrapServers: servers}
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

	f.FailNext(kafkafake.ClusterID, &kafka.Error{Kind: kafka.KindUnreachable, Op: "cluster id"})
	pd := party("d", "localhost:9092")
	pd.Namespace, pd.Owner = "tenant", "ConsumerPipeline/tenant/d"
	s, err := same(party("a"), pd)
	g.Expect(s).To(BeFalse(), "a claimant of another namespace whose cluster was never identified holds nothing")
	g.Expect(err).To(MatchError(ContainSubstring("ConsumerPipeline/tenant/d")))

	missing := party("e", "localhost:9092")
	missing.Namespace = "tenant"
	missing.Kafka.SASL = &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "gone"}}
	s, err = same(party("a"), missing)
	g.Expect(s).To(BeFalse())
	var specErr *Error
	g.Expect(errors.As(err, &specErr)).To(BeTrue(), "the connection does not resolve: %v", err)
}

// A party's cluster is the ID read now through its connection, else the one its status recorded
// (Known), else unknown: a claimant never identified holds nothing against an identified resource,
// and a resource never identified itself waits behind any claimant. An ID read now wins
// over a stale recorded one (a cluster re-created), and only IDs read now are read again.
func TestClustersGoByTheIDReadNowElseTheRecordedOneElseHoldNothing(t *testing.T) {
	ctx := context.Background()
	f := kafkafake.New()
	cs := Clusters{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), Registry: kafka.NewRegistry(f, nil)}
	f.SetClusterID("x", "kafka.x:9092")
	f.SetClusterID("y", "kafka.y:9092")
	f.SetClusterID("y", "kafka.y2:9092")
	party := func(name, server, known string) *Party {
		return &Party{Owner: "ConsumerPipeline/ns/" + name, Namespace: "ns", Kafka: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{server}}, Known: known}
	}
	down := func(name, server, known string) *Party {
		p := party(name, server, known)
		p.Connect = func(context.Context) (kafka.Admin, error) {
			return nil, &kafka.Error{Kind: kafka.KindUnreachable, Op: "connect " + server}
		}
		return p
	}
	unreachable := &kafka.Error{Kind: kafka.KindUnreachable, Op: "cluster id"}
	g := NewWithT(t)

	// Known now, on both sides: the recorded IDs do not count.
	g.Expect(cs.Same(ctx, party("self", "kafka.y:9092", "x"), party("o", "kafka.y2:9092", "x"))).To(BeTrue(), "read now: one cluster, whatever the statuses say")
	g.Expect(cs.Same(ctx, party("self", "kafka.y:9092", ""), party("o", "kafka.x:9092", "y"))).To(BeFalse(), "read now: a stale recorded ID (a cluster re-created) does not count")

	// The claimant's brokers do not answer: its recorded ID.
	var seen []string
	self := party("self", "kafka.y:9092", "")
	self.OnRead = func(id string) { seen = append(seen, id) }
	f.ResetCalls()
	s, err := cs.Same(ctx, self, down("o", "kafka.x:9092", "x"))
	g.Expect(s).To(BeFalse(), "a restart during the claimant's outage: its recorded cluster is another")
	g.Expect(err).NotTo(HaveOccurred(), "told apart by the recorded ID")
	g.Expect(seen).To(ContainElement("y"), "the resource's own ID read now is reported, for its status")
	g.Expect(f.CallCount(kafkafake.Ping)).To(Equal(1), "only the ID read now is read again before they count as different")
	g.Expect(cs.Same(ctx, party("self", "kafka.y:9092", ""), down("o", "kafka.x:9092", "y"))).To(BeTrue(), "its recorded cluster is this one: it keeps its claim")

	// The resource's own brokers do not answer: its recorded ID.
	g.Expect(cs.Same(ctx, down("self", "kafka.y:9092", "y"), party("o", "kafka.x:9092", ""))).To(BeFalse())
	g.Expect(cs.Same(ctx, down("self", "kafka.y:9092", "x"), party("o", "kafka.x:9092", ""))).To(BeTrue())

	// Never identified: the claimant of another namespace holds nothing, one of the resource's own
	// keeps its claim; the resource itself waits behind the claimant.
	elsewhere := func(p *Party) *Party {
		p.Namespace, p.Owner = "tenant", "ConsumerPipeline/tenant/"+p.Owner[len("ConsumerPipeline/ns/"):]
		return p
	}
	f.FailNext(kafkafake.ClusterID, unreachable)
	s, err = cs.Same(ctx, party("self", "kafka.y:9092", ""), elsewhere(party("o", "kafka.x:9092", "")))
	g.Expect(s).To(BeFalse(), "a claimant of another namespace never identified holds nothing")
	g.Expect(err).To(MatchError(ContainSubstring("ConsumerPipeline/tenant/o")))
	f.FailNext(kafkafake.ClusterID, unreachable)
	s, err = cs.Same(ctx, party("self", "kafka.y:9092", ""), party("o", "kafka.x:9092", ""))
	g.Expect(s).To(BeTrue(), "a claimant of the resource's own namespace never identified keeps its claim")
	g.Expect(err).To(MatchError(ContainSubstring("ConsumerPipeline/ns/o")))
	s, err = cs.Same(ctx, down("self", "kafka.y:9092", ""), party("o", "kafka.x:9092", ""))
	g.Expect(s).To(BeTrue(), "a resource never identified waits behind an identified claimant")
	g.Expect(err).To(HaveOccurred(), "why it waits")
	s, err = cs.Same(ctx, down("self", "kafka.y:9092", ""), down("o", "kafka.x:9092", ""))
	g.Expect(s).To(BeTrue(), "neither identified: the resource waits, it could not run anyway")
	g.Expect(err).To(HaveOccurred())

	// A check waits for one claimant's silent brokers, not for each: after one, the others go by
	// their recorded IDs.
	asked := 0
	counted := func(name, server, known string) *Party {
		p := down(name, server, known)
		p.Connect = func(context.Context) (kafka.Admin, error) {
			asked++
			return nil, &kafka.Error{Kind: kafka.KindUnreachable, Op: "connect " + server}
		}
		return p
	}
	self = party("self", "kafka.y:9092", "")
	sameAs := func(o *Party) bool { s, _ := cs.Same(ctx, self, o); return s }
	g.Expect(sameAs(elsewhere(counted("o1", "kafka.o1:9092", "")))).To(BeFalse())
	g.Expect(sameAs(elsewhere(counted("o2", "kafka.o2:9092", "")))).To(BeFalse(), "not asked, nothing recorded: holds nothing")
	g.Expect(sameAs(counted("o3", "kafka.o3:9092", "y"))).To(BeTrue(), "not asked: its recorded ID")
	g.Expect(sameAs(counted("o4", "kafka.o4:9092", ""))).To(BeTrue(), "not asked, nothing recorded, in its own namespace: keeps its claim")
	g.Expect(asked).To(Equal(1), "one claimant's brokers waited for")

	// The same servers need no ID at all.
	g.Expect(cs.Same(ctx, down("self", "kafka.x:9092", ""), down("o", "KAFKA.x:9092", ""))).To(BeTrue())
}

// A resource compared with older claimants on several other clusters reads its own cluster ID
// again once, not once per claimant: a reconcile's Metadata requests grow with the claimants, one
// each, and its own cluster is asked once.
func TestClustersReadTheirOwnIDAgainOncePerComparisonRound(t *testing.T) {
	ctx := context.Background()
	f := kafkafake.New()
	cs := Clusters{Reader: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), Registry: kafka.NewRegistry(f, nil)}
	party := func(name, server string) *Party {
		return &Party{Owner: "ConsumerPipeline/ns/" + name, Namespace: "ns", Kafka: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{server}}}
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
