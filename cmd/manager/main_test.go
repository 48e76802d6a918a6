package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestFlagsRejectATooShortRefreshInterval(t *testing.T) {
	_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--status-refresh-interval=10ms"})
	if err == nil {
		t.Fatal("a 10ms refresh interval was accepted")
	}
}

// TestManagerStartsWithProbesMetricsAndLeaderElection runs the manager against the envtest API server
// with leader election on and checks its probes, its metrics endpoint and its Lease.
func TestManagerStartsWithProbesMetricsAndLeaderElection(t *testing.T) {
	g := NewWithT(t)
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	metrics, probes := freeAddr(t), freeAddr(t)
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probes,
		"--leader-elect", "--leader-election-namespace=default", "--zap-devel",
	})
	g.Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, env.Config, o) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			g.Expect(err).NotTo(HaveOccurred())
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30s of its context ending")
		}
	}()

	for _, path := range []string{"/healthz", "/readyz"} {
		g.Eventually(func() (int, error) {
			code, _, err := get("http://" + probes + path)
			return code, err
		}, 30*time.Second, 100*time.Millisecond).Should(Equal(http.StatusOK), path)
	}
	g.Eventually(func() (string, error) {
		_, body, err := get("http://" + metrics + "/metrics")
		return body, err
	}, 30*time.Second, 100*time.Millisecond).Should(ContainSubstring("leader_election_master_status"))

	lease := &coordinationv1.Lease{}
	g.Eventually(func() (string, error) {
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: o.leaderElectionID}, lease)
		if err != nil || lease.Spec.HolderIdentity == nil {
			return "", err
		}
		return *lease.Spec.HolderIdentity, nil
	}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty())
	host, _ := os.Hostname()
	g.Expect(*lease.Spec.HolderIdentity).To(HavePrefix(host), fmt.Sprintf("lease %+v", lease.Spec))
}
