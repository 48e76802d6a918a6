package kafkastats

import (
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Commits batches the committed offsets of the consumer groups of every resource on one connection
// into one OffsetFetch round per refresh (Kafka answers for many groups in one request per group
// coordinator).
type Commits struct {
	reads *batchedReads[kafka.GroupOffsets]
}

// NewCommits returns an empty Commits reading the time from clk.
func NewCommits(clk clock.PassiveClock) *Commits {
	return &Commits{reads: newBatchedReads(clk, func(ctx context.Context, admin kafka.Admin, groups []string) (map[string]kafka.GroupOffsets, error) {
		got, err := admin.GroupOffsets(ctx, groups...)
		if err == nil || got == nil {
			return got, err
		}
		// Some groups failed. Unless all did (the broker is unreachable, say: not worth caching for an
		// interval), the round stands and each group's error reaches its own member only.
		for _, g := range got {
			if g.Err == nil {
				return got, nil
			}
		}
		return nil, err
	})}
}

// Get returns the offsets group committed, read for member over the connection connKey (admin is
// its client), no older than maxAge.
func (c *Commits) Get(ctx context.Context, admin kafka.Admin, connKey, member, group string, maxAge time.Duration) (kafka.GroupOffsets, error) {
	got, _, err := c.reads.Get(ctx, admin, connKey, member, []string{group}, maxAge)
	if err != nil {
		return kafka.GroupOffsets{}, err
	}
	g := got[group]
	return g, g.Err
}

// Forget drops member from the rounds.
func (c *Commits) Forget(member string) { c.reads.Forget(member) }

// Members is the number of resources whose reads are batched.
func (c *Commits) Members() int { return c.reads.members() }
