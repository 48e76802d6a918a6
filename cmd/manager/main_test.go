package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/controllers"
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
// with leader election on and checks its probes, its metrics endpoint (plain HTTP on a loopback address,
// as the local stack of make run and make dev binds it) and its Lease.
func TestManagerStartsWithProbesMetricsAndLeaderElection(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)

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

func TestKafkaDefaultConnectionFlags(t *testing.T) {
	dir := t.TempDir()
	pwFile := dir + "/password"
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{
		"--kafka-bootstrap-servers=a:9092, b:9092", "--kafka-request-timeout=3s", "--kafka-deletion-timeout=30s",
		"--max-concurrent-reconciles=8", "--kafka-tls", "--kafka-tls-server-name=kafka.internal",
		"--kafka-sasl-mechanism=SCRAM-SHA-512", "--kafka-sasl-username=operator", "--kafka-sasl-password-file=" + pwFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := o.controllers
	if fmt.Sprint(c.DefaultBootstrapServers) != "[a:9092 b:9092]" || o.kafkaRequestTimeout != 3*time.Second ||
		c.DeletionTimeout != 30*time.Second || c.MaxConcurrentReconciles != 8 {
		t.Errorf("unexpected options: %+v", c)
	}
	if c.DefaultKafkaTLS == nil || c.DefaultKafkaTLS.ServerName != "kafka.internal" {
		t.Errorf("TLS: %v", c.DefaultKafkaTLS)
	}
	if c.DefaultKafkaSASL == nil || c.DefaultKafkaSASL.Username != "operator" || c.DefaultKafkaSASL.Password != "from-file" {
		t.Errorf("SASL: %v", c.DefaultKafkaSASL)
	}

	// Without flags: plaintext, no SASL, the package defaults.
	o, err = parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.controllers.DefaultKafkaTLS != nil || o.controllers.DefaultKafkaSASL != nil || o.controllers.DeletionTimeout != 2*time.Minute {
		t.Errorf("unexpected defaults: %+v", o.controllers)
	}

	for _, args := range [][]string{
		{"--kafka-sasl-username=operator"},
		{"--kafka-sasl-mechanism=GSSAPI", "--kafka-sasl-username=u", "--kafka-sasl-password-file=" + pwFile},
		{"--kafka-sasl-mechanism=PLAIN", "--kafka-sasl-username=u", "--kafka-sasl-password-file=" + dir + "/missing"},
		{"--kafka-tls-ca-file=" + pwFile},
	} {
		if _, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), args); err == nil {
			t.Errorf("%v accepted", args)
		} else if strings.Contains(err.Error(), "from-file") {
			t.Errorf("%v: the error shows the password: %v", args, err)
		}
	}
}

func TestFlagsAlertRuleLabels(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--alert-rule-labels=release=prometheus, team=payments"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.controllers.AlertRuleLabels).To(Equal(map[string]string{"release": "prometheus", "team": "payments"}))
	g.Expect(o.controllers.DispatcherImage).NotTo(BeEmpty())

	for _, bad := range []string{"release", "bad key=x", "k=not a value"} {
		_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--alert-rule-labels=" + bad})
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestFlagsAlertRunbookBaseURL(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.controllers.AlertRunbookBaseURL).To(Equal("https://github.com/retryops/retry-operator/blob/main/docs/runbooks.md"))
	o, err = parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--alert-runbook-base-url=https://wiki.example.com/retry/runbooks"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.controllers.AlertRunbookBaseURL).To(Equal("https://wiki.example.com/retry/runbooks"))
	for _, bad := range []string{"wiki.example.com/runbooks", "ftp://example.com/r", "https://example.com/r.md#top", "/docs/runbooks.md"} {
		_, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--alert-runbook-base-url=" + bad})
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestKafkaTenancyFlags(t *testing.T) {
	dir := t.TempDir()
	pwFile := dir + "/password"
	if err := os.WriteFile(pwFile, []byte("plain-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	parse := func(args ...string) (*options, error) {
		return parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), args)
	}
	plain := []string{"--kafka-sasl-mechanism=PLAIN", "--kafka-sasl-username=operator", "--kafka-sasl-password-file=" + pwFile}

	// PLAIN without TLS is refused at start, with a message naming the way out and not the password.
	_, err := parse(plain...)
	if err == nil || !strings.Contains(err.Error(), "--kafka-allow-plaintext-password") || strings.Contains(err.Error(), "plain-secret") {
		t.Errorf("PLAIN without TLS: want a refusal naming --kafka-allow-plaintext-password, got %v", err)
	}
	o, err := parse(append(plain, "--kafka-allow-plaintext-password")...)
	if err != nil || o.controllers.DefaultKafkaSASL == nil || !o.controllers.DefaultKafkaSASL.AllowPlaintext {
		t.Errorf("PLAIN allowed: %v, %v", o, err)
	}
	if _, err := parse(append(plain, "--kafka-tls")...); err != nil {
		t.Errorf("PLAIN over TLS: %v", err)
	}

	o, err = parse("--kafka-allowed-bootstrap-servers=*.kafka.svc:9092, broker-0.example.com:9093", "--require-resource-credentials")
	if err != nil {
		t.Fatal(err)
	}
	if k := o.controllers.KafkaTenancy; fmt.Sprint(k.AllowedBootstrapServers) != "[*.kafka.svc:9092 broker-0.example.com:9093]" || !k.RequireResourceCredentials {
		t.Errorf("tenancy: %+v", k)
	}
	o, err = parse()
	if err != nil || len(o.controllers.KafkaTenancy.AllowedBootstrapServers) != 0 || o.controllers.KafkaTenancy.RequireResourceCredentials {
		t.Errorf("defaults: any server, credentials may be borrowed; got %+v, %v", o, err)
	}
	if _, err := parse("--kafka-allowed-bootstrap-servers=kafka.svc"); err == nil || !strings.Contains(err.Error(), "kafka.svc") {
		t.Errorf("a pattern without a port: got %v", err)
	}

	// The group claim policy defaults to the topic prefix; given empty, any group.
	o, err = parse("--topic-prefix={namespace}.")
	if err != nil {
		t.Fatal(err)
	}
	if k := o.controllers.KafkaTenancy; k.GroupPrefix != nil || k.CheckGroupClaim("team-a", "payments-service") == nil || k.CheckGroupClaim("team-a", "team-a.billing") != nil {
		t.Errorf("--group-prefix by default: the topic prefix; got %+v", k)
	}
	o, err = parse("--topic-prefix={namespace}.", "--group-prefix=")
	if err != nil || o.controllers.KafkaTenancy.CheckGroupClaim("team-a", "payments-service") != nil {
		t.Errorf("--group-prefix empty allows any group: %v", err)
	}
	o, err = parse("--group-prefix=grp-{namespace}.")
	if err != nil || o.controllers.KafkaTenancy.CheckGroupClaim("team-a", "team-a.billing") == nil || o.controllers.KafkaTenancy.CheckGroupClaim("team-a", "grp-team-a.billing") != nil {
		t.Errorf("--group-prefix of its own: %v", err)
	}
	// A policy under which namespace team's names start namespace team-a's is refused.
	for _, flag := range []string{"--group-prefix=grp-{namespace}-", "--topic-prefix={namespace}"} {
		if _, err := parse(flag); err == nil || !strings.Contains(err.Error(), "does not keep namespaces apart") {
			t.Errorf("%s: got %v", flag, err)
		}
	}
}

// TestWatchNamespacesFlag: --watch-namespaces restricts the manager's cache (and the rule cache)
// to the namespaces named; without it every namespace is watched. Either way the owned kinds are
// cached by the operator's label only, and no read starts an informer of its own.
func TestWatchNamespacesFlag(t *testing.T) {
	g := NewWithT(t)
	o, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--watch-namespaces=team-a, team-b"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o.controllers.WatchNamespaces).To(Equal([]string{"team-a", "team-b"}))
	opts := controllers.CacheOptions(o.controllers.WatchNamespaces)
	g.Expect(opts.DefaultNamespaces).To(HaveLen(2))
	g.Expect(opts.DefaultNamespaces).To(HaveKey("team-a"))
	g.Expect(opts.DefaultNamespaces).To(HaveKey("team-b"))
	g.Expect(opts.ReaderFailOnMissingInformer).To(BeTrue())
	g.Expect(opts.ByObject).To(HaveLen(6))
	for obj, by := range opts.ByObject {
		g.Expect(by.Label.String()).To(Equal("app.kubernetes.io/managed-by=retry-operator"), "%T", obj)
	}

	o, err = parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(controllers.CacheOptions(o.controllers.WatchNamespaces).DefaultNamespaces).To(BeEmpty())

	_, err = parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--watch-namespaces=Team_A"})
	g.Expect(err).To(MatchError(ContainSubstring("Team_A")))
}
