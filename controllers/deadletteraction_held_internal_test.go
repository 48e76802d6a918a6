package controllers

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/retryops/retry-operator/internal/kafka"
)

// forgettingFactory records which clients the registry closes.
type forgettingFactory struct{ closed []string }

func (f *forgettingFactory) Admin(context.Context, kafka.Connection) (kafka.Admin, error) {
	return nil, nil
}

func (f *forgettingFactory) Forget(key string) bool {
	f.closed = append(f.closed, key)
	return true
}

// TestAReplayIntoAnotherClusterKeepsTheQueuesClient: a replay's target pipeline is on another
// connection than its queue; registering the target's client must not move the action off the
// queue's client, which the run uses to its end. Both go when the run ends.
func TestAReplayIntoAnotherClusterKeepsTheQueuesClient(t *testing.T) {
	f := &forgettingFactory{}
	reg := kafka.NewRegistry(f, nil)
	ctx := context.Background()
	queueConn := kafka.Connection{BootstrapServers: []string{"queues:9092"}}
	pipelineConn := kafka.Connection{BootstrapServers: []string{"pipelines:9092"}}
	action := types.NamespacedName{Namespace: "shop", Name: "replay"}
	held := &heldUsers{registry: reg}

	_, _, _ = reg.Admin(ctx, actionOwner(action), queueConn)
	held.hold(actionOwner(action))
	owner := actionTargetOwner(action, types.NamespacedName{Namespace: "shop", Name: "orders"})
	_, _, _ = reg.Admin(ctx, owner, pipelineConn)
	held.hold(owner)
	if len(f.closed) != 0 {
		t.Fatalf("closed %q while the run uses them", f.closed)
	}
	held.releaseAll()
	if !slices.Equal(slices.Sorted(slices.Values(f.closed)), slices.Sorted(slices.Values([]string{queueConn.Key(), pipelineConn.Key()}))) {
		t.Fatalf("closed %q at the run's end, want both clients", f.closed)
	}
}
