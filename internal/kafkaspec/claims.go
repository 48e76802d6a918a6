package kafkaspec

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A claim is a name (a topic, a consumer group, a retry tier base) on a Kafka cluster. The cluster
// is what Kafka says it is, its cluster ID (kafka.Admin.ClusterID), not how a spec spells its
// bootstrap servers: 127.0.0.1:9092 and localhost:9092, a Service's short and long DNS names, or one
// broker and the whole list reach one cluster. No spec tells the ID without asking Kafka, so the
// field indexes of claims hold the name alone, and the resources they list for a name are kept or
// dropped by cluster when a claim is checked (Clusters.Same).

// SameServers reports whether a and b name the same bootstrap servers, trimmed, lower-cased, in any
// order and repeats ignored: one cluster, known without asking Kafka.
func SameServers(a, b []string) bool { return normalizeServers(a) == normalizeServers(b) }

// normalizeServers returns the servers lower-cased, trimmed, sorted and distinct.
func normalizeServers(servers []string) string {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		out = append(out, strings.ToLower(strings.TrimSpace(s)))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// Claimant is a resource claiming a topic.
type Claimant struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
	Created   time.Time
}

// ClaimantOf is the claimant o, of kind kind.
func ClaimantOf(kind string, o client.Object) Claimant {
	return Claimant{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID(), Created: o.GetCreationTimestamp().Time}
}

func (c Claimant) String() string { return fmt.Sprintf("%s %s/%s", c.Kind, c.Namespace, c.Name) }

// OlderThan orders claimants: the earlier creation timestamp first, then namespace, name and UID
// (creation timestamps have a one-second resolution).
func (c Claimant) OlderThan(o Claimant) bool {
	if !c.Created.Equal(o.Created) {
		return c.Created.Before(o.Created)
	}
	if c.Namespace != o.Namespace {
		return c.Namespace < o.Namespace
	}
	if c.Name != o.Name {
		return c.Name < o.Name
	}
	return c.UID < o.UID
}

// Winner returns the oldest of the claimants, which manages the topic. ok is false without
// claimants.
func Winner(cs []Claimant) (winner Claimant, ok bool) {
	for i, c := range cs {
		if i == 0 || c.OlderThan(winner) {
			winner = c
		}
	}
	return winner, len(cs) > 0
}
