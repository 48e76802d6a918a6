package kafkafake

import (
	"context"
	"slices"
	"strings"

	"github.com/retryops/retry-operator/internal/kafka"
)

// ClusterID names kafka.Admin.ClusterID.
const ClusterID = "ClusterID"

// DefaultClusterID is the cluster ID of every connection SetClusterID gave no other.
const DefaultClusterID = "kafkafake-cluster"

// SetClusterID makes id the cluster ID of the connections whose bootstrap servers are servers
// (compared trimmed, lower-cased, in any order), or, without servers, of every connection given no
// ID of its own and of the Fake used as an Admin directly. Every connection reaches the same Fake
// whatever its ID: the ID is what the sharing checks compare, so that a test can make two spellings
// of one cluster share an ID (the default) or tell them apart.
func (f *Fake) SetClusterID(id string, servers ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(servers) == 0 {
		f.clusterID = id
		return
	}
	if f.clusterIDs == nil {
		f.clusterIDs = map[string]string{}
	}
	f.clusterIDs[serversKey(servers)] = id
}

// ClusterID implements kafka.Admin: the ID of the Fake used directly (SetClusterID without servers).
// The call is recorded and takes injected errors, as every other.
func (f *Fake) ClusterID(ctx context.Context) (string, error) {
	return f.clusterIDOf(ctx, "")
}

func (f *Fake) clusterIDOf(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, ClusterID, key); err != nil {
		return "", err
	}
	if id, ok := f.clusterIDs[key]; ok {
		return id, nil
	}
	if f.clusterID != "" {
		return f.clusterID, nil
	}
	return DefaultClusterID, nil
}

// connAdmin is the Fake as the Admin of one connection: its ClusterID is the connection's.
type connAdmin struct {
	*Fake
	servers string
}

// ClusterID implements kafka.Admin: the ID SetClusterID gave the connection's servers.
func (a connAdmin) ClusterID(ctx context.Context) (string, error) {
	return a.clusterIDOf(ctx, a.servers)
}

var _ kafka.BatchAdmin = connAdmin{}

// serversKey is servers trimmed, lower-cased, sorted and distinct.
func serversKey(servers []string) string {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		out = append(out, strings.ToLower(strings.TrimSpace(s)))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}
