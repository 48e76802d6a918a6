package kafkaspec

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
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
	Kafka     *retryv1alpha1.KafkaConnection
	// Known is the cluster ID the resource's status last recorded for its connection (its
	// status.kafkaClusterID): its cluster while its brokers cannot be asked, a manager's restart
	// included.
	Known string
	// Admin is the resource's client once connected; nil connects it (through the registry) on
	// first need, and keeps it for the next comparison.
	Admin kafka.Admin
	// Connect, when set, connects the resource instead (the reconciler's own connection step).
	Connect func(context.Context) (kafka.Admin, error)
	// OnRead, when set, is told every cluster ID read through the connection (the reconciler
	// records its own in its status).
	OnRead func(id string)

	// refreshed is set once the party's ID was read again (Same): a party compared with several
	// others asks its brokers again once, not once per comparison.
	refreshed bool
	// connectErr is why the party could not connect: it is not tried again for the next comparison.
	connectErr error
	// missedOne is set once the ID of a party compared with this one could not be read: the parties
	// compared with it after are not asked (their recorded IDs count), so that a check waits for at
	// most one party's brokers that do not answer, however many claim its names.
	missedOne bool
}

// errNotAsked is why Same took a party's recorded ID, or none, without asking its brokers.
var errNotAsked = errors.New("not asked: the brokers of another claimant compared in this check did not answer")

// Same reports whether a and b are on one cluster: at once, without Kafka, when they name the same
// bootstrap servers; otherwise by their cluster IDs. A party's ID is the one read now through its
// connection, else the one its status recorded (Known): an outage alone, or a manager's restart
// during one, never moves a claim. IDs that differ are read again (one Metadata request each, once
// per Party) before the two count as different clusters, so that an ID remembered from before a
// cluster was recreated behind the same names never splits one cluster in two.
//
// A party whose cluster was never identified (its connection does not resolve, its brokers never
// answered, and its status records no ID) has reached no cluster, so it runs nothing on any:
//   - a unidentified: same is true, with err saying why; a waits behind b rather than run on what
//     may be b's cluster. It cannot run anyway while its brokers cannot be reached.
//   - b unidentified, a identified: same is false, with err saying why; b holds nothing against a
//     in another namespace (a tenant's resource at an address that never answers squats no other
//     tenant's names), but keeps its claim in a's own (same is true, with err).
//
// Of the parties b compared with one a, only those until the first whose ID cannot be read are
// asked; the others go by their recorded IDs (a.missedOne).
func (c Clusters) Same(ctx context.Context, a, b *Party) (same bool, err error) {
	if SameServers(Servers(a.Kafka, c.Defaults), Servers(b.Kafka, c.Defaults)) {
		return true, nil
	}
	var idb string
	var errb error
	if a.missedOne {
		idb, errb = b.Known, errNotAsked
	} else if idb, errb = c.id(ctx, b, false); errb != nil {
		a.missedOne = true
	}
	ida, erra := c.id(ctx, a, false)
	switch {
	case ida == "":
		return true, erra
	case idb == "" && a.Namespace == b.Namespace:
		// In its own namespace a claimant never identified keeps its claim: its pods may reach
		// brokers the manager cannot, and two pipelines in one group split its partitions.
		return true, errb
	case idb == "":
		return false, errb
	}
	if ida == idb {
		return true, nil
	}
	// Only an ID read now is read again: brokers that did not answer are not waited for twice.
	ida, idb = c.again(ctx, a, ida, erra), c.again(ctx, b, idb, errb)
	return ida == idb, nil
}

// again reads p's ID again when the first read (id, err) was now, not its status's.
func (c Clusters) again(ctx context.Context, p *Party, id string, err error) string {
	if err != nil {
		return id
	}
	if fresh, err := c.id(ctx, p, true); err == nil {
		return fresh
	}
	return id
}

// id returns p's cluster ID: the one read now, else the one its status recorded (with the reason
// the read failed), else "" and that reason. fresh asks the brokers again first (a failure leaves
// the ID the client remembers, if any).
func (c Clusters) id(ctx context.Context, p *Party, fresh bool) (string, error) {
	id, err := c.read(ctx, p, fresh)
	if err != nil {
		return p.Known, err
	}
	if p.OnRead != nil {
		p.OnRead(id)
	}
	return id, nil
}

func (c Clusters) read(ctx context.Context, p *Party, fresh bool) (string, error) {
	if p.Admin == nil {
		if p.connectErr != nil {
			return "", p.connectErr
		}
		var err error
		if p.Admin, err = c.connect(ctx, p); err != nil {
			p.connectErr = err
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
func (d Defaults) CheckConnection(spec *retryv1alpha1.KafkaConnection) error { return d.check(spec) }
