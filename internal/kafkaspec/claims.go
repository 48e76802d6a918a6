package kafkaspec

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ClaimKey identifies a topic on a cluster: the normalised bootstrap servers and the topic name.
// Two resources whose spec.kafka resolve to the same servers and name the same topic claim the same
// topic. (Different server lists that reach one cluster are not recognised: Kafka has no cheap
// cluster identity in the Admin interface.)
func ClaimKey(servers []string, topic string) string {
	return normalizeServers(servers) + "|" + topic
}

// normalizeServers returns the servers lower-cased, trimmed, sorted and distinct: the identity of a
// cluster for topic claims.
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

// olderThan orders claimants: the earlier creation timestamp first, then namespace, name and UID
// (creation timestamps have a one-second resolution).
func (c Claimant) olderThan(o Claimant) bool {
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
		if i == 0 || c.olderThan(winner) {
			winner = c
		}
	}
	return winner, len(cs) > 0
}

// Owner returns the oldest of self (of kind kind) and the objects of list's kind that c lists with
// opts (those indexed under the claim key of self's topic): the one that manages the topic.
func Owner(ctx context.Context, c client.Reader, self client.Object, kind string, list client.ObjectList, opts ...client.ListOption) (Claimant, error) {
	if err := c.List(ctx, list, opts...); err != nil {
		return Claimant{}, err
	}
	cs := []Claimant{ClaimantOf(kind, self)}
	err := meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok && obj.GetUID() != self.GetUID() {
			cs = append(cs, ClaimantOf(kind, obj))
		}
		return nil
	})
	w, _ := Winner(cs)
	return w, err
}
