package franz

import (
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// One cluster spelled two ways (127.0.0.1 and localhost) gives one cluster ID, read once per client
// and then remembered: while the brokers are unreachable too. Two clusters give two.
func TestClusterIDIdentifiesTheClusterWhateverItsServersAreCalled(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t, kfake.ClusterID("cluster-a"))
	var metadata atomic.Int64
	c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		metadata.Add(1)
		return nil, nil, false
	})
	var localhost []string
	for _, a := range c.ListenAddrs() {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		localhost = append(localhost, net.JoinHostPort("localhost", port))
	}
	byIP, _ := newAdmin(t, plainConn(c), WithRequestTimeout(2*time.Second))
	byName, _ := newAdmin(t, kafka.Connection{BootstrapServers: localhost, ClientID: "test"})
	for _, a := range []kafka.Admin{byIP, byName, byIP} {
		id, err := a.ClusterID(ctx)
		if err != nil || id != "cluster-a" {
			t.Fatalf("ClusterID = %q, %v; want cluster-a", id, err)
		}
	}
	if n := metadata.Load(); n != 2 {
		t.Errorf("%d Metadata requests for three reads of two clients, want 2 (one per client)", n)
	}
	other := newCluster(t, kfake.ClusterID("cluster-b"))
	otherAdmin, _ := newAdmin(t, plainConn(other))
	if id, err := otherAdmin.ClusterID(ctx); err != nil || id != "cluster-b" {
		t.Fatalf("another cluster's ID = %q, %v; want cluster-b", id, err)
	}

	c.Close()
	if err := byIP.Ping(ctx); err == nil {
		t.Fatal("Ping of a closed cluster succeeded")
	}
	if id, err := byIP.ClusterID(ctx); err != nil || id != "cluster-a" {
		t.Fatalf("ClusterID while unreachable = %q, %v; want the remembered cluster-a", id, err)
	}
}

// The ID follows the Metadata answers the client receives for any call, so that a cluster whose ID
// changes behind the same servers is seen by the next call that asks Kafka anything.
func TestClusterIDFollowsEveryMetadataAnswer(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t, kfake.ClusterID("before"))
	a, _ := newAdmin(t, plainConn(c))
	if id, err := a.ClusterID(ctx); err != nil || id != "before" {
		t.Fatalf("ClusterID = %q, %v", id, err)
	}
	c.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		resp.Version = req.GetVersion()
		resp.ClusterID = kmsg.StringPtr("after")
		host, port, _ := net.SplitHostPort(c.ListenAddrs()[0])
		p, _ := strconv.Atoi(port)
		rb := kmsg.NewMetadataResponseBroker()
		rb.Host, rb.Port = host, int32(p)
		resp.Brokers = append(resp.Brokers, rb)
		return resp, nil, true
	})
	if _, err := a.DescribeTopics(ctx, "missing"); err != nil {
		t.Fatal(err)
	}
	if id, err := a.ClusterID(ctx); err != nil || id != "after" {
		t.Fatalf("ClusterID after a Metadata answer with another ID = %q, %v; want after", id, err)
	}
}

// A cluster ID longer than kafka.MaxClusterIDBytes is no ID: it is never kept, so that a broker
// cannot make every status that records it too long for the API server.
func TestAnOverlongClusterIDIsRefused(t *testing.T) {
	ctx := ctxT(t)
	c := newCluster(t, kfake.ClusterID(strings.Repeat("x", kafka.MaxClusterIDBytes+1)))
	a, _ := newAdmin(t, plainConn(c), WithRequestTimeout(2*time.Second))
	if id, err := a.ClusterID(ctx); err == nil {
		t.Fatalf("ClusterID = %d bytes, <nil>; want an error", len(id))
	}
	ok := newCluster(t, kfake.ClusterID(strings.Repeat("y", kafka.MaxClusterIDBytes)))
	b, _ := newAdmin(t, plainConn(ok), WithRequestTimeout(2*time.Second))
	if id, err := b.ClusterID(ctx); err != nil || len(id) != kafka.MaxClusterIDBytes {
		t.Fatalf("ClusterID = %d bytes, %v; want %d bytes", len(id), err, kafka.MaxClusterIDBytes)
	}
}
