package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRequestsAddrCountsRequestsPerKey: --requests-addr serves the requests the broker received per
// key, the topics it was asked to create and the topics of each ListOffsets request.
func TestRequestsAddrCountsRequestsPerKey(t *testing.T) {
	g := NewWithT(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer countRequests(c).serve(ln).Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	_, err = adm.CreateTopics(ctx, 1, 1, nil, "a", "b")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = adm.ListEndOffsets(ctx, "a", "b")
	g.Expect(err).NotTo(HaveOccurred())

	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(json.NewDecoder(resp.Body).Decode(v)).To(Succeed())
	}
	var counts map[string]int64
	get("/counts", &counts)
	g.Expect(counts).To(HaveKeyWithValue("19", int64(1)), "CreateTopics (key %d)", kmsg.CreateTopics)
	g.Expect(counts).To(HaveKeyWithValue("2", int64(1)), "ListOffsets (key %d)", kmsg.ListOffsets)
	var created []string
	get("/created", &created)
	g.Expect(created).To(ConsistOf("a", "b"))
	var offsets []int
	get("/list-offsets", &offsets)
	g.Expect(offsets).To(Equal([]int{2}))
}
