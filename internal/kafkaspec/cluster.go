package kafkaspec

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Clusters tells whether the connections of resources reach one Kafka cluster, by the cluster IDs
// their clients read (kafka.Admin.ClusterID: one Metadata request per client, then remembered and
// kept up to date by the client's other Metadata requests).
type Clusters struct {
	// Reader reads the Secrets a connection references.
	Reader client.Reader
	// Defaults are the manager's default connection and connection rules.
	Defaults Defaults
	// Registry hands out the clients, one per connection.
	Registry *kafka.Registry
}

// Party is a resource's connection, one side of Clusters.Same.
type Party struct {
	// Owner is the resource's name in the registry (its user of the connection).
	Owner string
	// Namespace and Kafka are the resource's namespace and spec.kafka.
	Namespace string
	Kafka     *v1.KafkaConnection
	// Admin is the resource's client once connected; nil connects it (through the registry) on
	// first need, and keeps it for the next comparison.
	Admin kafka.Admin
	// Connect, when set, connects the resource instead (the reconciler's own connection step).
	Connect func(context.Context) (kafka.Admin, error)

	// refreshed is set once the party's ID was read again (Same): a party compared with several
	// others asks its brokers again once, not once per comparison.
	refreshed bool
}

// Same reports whether a and b are on one cluster: at once, without Kafka, when they name the same
// bootstrap servers; otherwise when their cluster IDs are equal. IDs that differ are read again
// (one Metadata request each, once per Party) before the two count as different clusters, so that an ID remembered
// from before a cluster was recreated behind the same names never splits one cluster in two.
//
// err says why it cannot be told (a connection that does not resolve, brokers that never answered
// this client): same is then true, so that a claimant whose cluster is unknown keeps its claim
// rather than lose it while its brokers are out of reach; an ID once read stays known meanwhile.
func (c Clusters) Same(ctx context.Context, a, b *Party) (same bool, err error) {
	if SameServers(Servers(a.Kafka, c.Defaults), Servers(b.Kafka, c.Defaults)) {
		return true, nil
	}
	ida, err := c.id(ctx, a, false)
	if err != nil {
		return true, err
	}
	idb, err := c.id(ctx, b, false)
	if err != nil {
		return true, err
	}
	if ida == idb {
		return true, nil
	}
	if ida, err = c.id(ctx, a, true); err == nil {
		idb, err = c.id(ctx, b, true)
	}
	if err != nil {
		return true, err
	}
	return ida == idb, nil
}

// id returns p's cluster ID; fresh asks the brokers again first (a failure leaves the remembered
// ID, if any).
func (c Clusters) id(ctx context.Context, p *Party, fresh bool) (string, error) {
	if p.Admin == nil {
		var err error
		if p.Admin, err = c.connect(ctx, p); err != nil {
			return "", err
		}
	}
	if fresh && !p.refreshed {
		p.refreshed = true
		_ = p.Admin.Ping(ctx)
	}
	id, err := p.Admin.ClusterID(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the cluster ID of %s: %w", p.Owner, err)
	}
	return id, nil
}

func (c Clusters) connect(ctx context.Context, p *Party) (kafka.Admin, error) {
	if p.Connect != nil {
		return p.Connect(ctx)
	}
	conn, err := Resolve(ctx, c.Reader, p.Namespace, p.Kafka, c.Defaults)
	if err != nil {
		return nil, fmt.Errorf("the Kafka connection of %s: %w", p.Owner, err)
	}
	a, _, err := c.Registry.Admin(ctx, p.Owner, conn)
	if err != nil {
		return nil, fmt.Errorf("the Kafka client of %s: %w", p.Owner, err)
	}
	return a, nil
}

// CheckConnection reports, as Resolve does before it reads any Secret, a connection the manager's
// rules refuse (its allow-list, its requirement of resources' own credentials): a resource on one
// reaches no cluster through the operator, and its claims hold nothing.
func (d Defaults) CheckConnection(spec *v1.KafkaConnection) error { return d.check(spec) }
