package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// TestASecuredBrokerAuthenticatesItsUsersAndLogsThem: with TLS, a users file and --acls, the broker
// lets in only its users over TLS, applies ACLs to those that are not superusers, logs every
// authentication's user, and, restarted on the same data dir with new passwords, takes the file's.
func TestASecuredBrokerAuthenticatesItsUsersAndLogsThem(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	pki := kafkatest.NewPKI(t, "test-ca")
	cert, key := pki.Issue(t, "broker", true)
	g.Expect(os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600)).To(Succeed())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.CAPEM)
	data := filepath.Join(dir, "data")

	start := func(adminPass string) (*kfake.Cluster, *bytes.Buffer) {
		t.Helper()
		users, err := json.Marshal([]user{
			{Mechanism: "SCRAM-SHA-512", User: "admin", Password: adminPass, Superuser: true},
			{Mechanism: "SCRAM-SHA-512", User: "tenant", Password: "tenant-pass"},
		})
		g.Expect(err).NotTo(HaveOccurred())
		usersFile := filepath.Join(dir, "users.json")
		g.Expect(os.WriteFile(usersFile, users, 0o600)).To(Succeed())
		opts, err := options(0, data, 1, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), "", usersFile, true)
		g.Expect(err).NotTo(HaveOccurred())
		c, err := kfake.NewCluster(opts...)
		g.Expect(err).NotTo(HaveOccurred())
		log := &bytes.Buffer{}
		logAuthentications(c, log)
		return c, log
	}
	admin := func(c *kfake.Cluster, name, pass string) *kadm.Client {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryTimeout(2*time.Second),
			kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
			kgo.SASL(scram.Auth{User: name, Pass: pass}.AsSha512Mechanism()))
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(cl.Close)
		return kadm.NewClient(cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, log := start("first-pass")
	_, err := admin(c, "admin", "first-pass").CreateTopic(ctx, 1, 1, nil, "orders")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = admin(c, "tenant", "tenant-pass").ListTopics(ctx, "orders")
	g.Expect(err).To(MatchError(kerr.TopicAuthorizationFailed), "no ACL lets the tenant describe orders")
	_, err = admin(c, "tenant", "wrong").ListTopics(ctx)
	g.Expect(err).To(HaveOccurred())
	// One line per connection that authenticated, or tried to: each client opens several.
	seen := map[string]bool{}
	for _, u := range strings.Fields(strings.NewReplacer(`{"user":"`, "", `"}`, "").Replace(log.String())) {
		seen[u] = true
	}
	g.Expect(seen).To(Equal(map[string]bool{"admin": true, "tenant": true}), log.String())
	c.Close()

	c, _ = start("second-pass")
	defer c.Close()
	_, err = admin(c, "admin", "first-pass").ListTopics(ctx)
	g.Expect(err).To(HaveOccurred(), "the users file replaces the password the data dir kept")
	topics, err := admin(c, "admin", "second-pass").ListTopics(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(topics.Has("orders")).To(BeTrue(), "the topics the data dir kept are there")
}

func TestSASLUserReadsTheFirstMessage(t *testing.T) {
	cases := []struct {
		name string
		auth string
		user string
		ok   bool
	}{
		{"SCRAM client-first", "n,,n=team-a-consumer,r=abc", "team-a-consumer", true},
		{"SCRAM client-first with escapes", "n,,n=a=2Cb=3Dc,r=abc", "a,b=c", true},
		{"SCRAM client-final names no user", "c=biws,r=abcdef,p=xyz", "", false},
		{"PLAIN", "\x00alice\x00secret", "alice", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			user, ok := saslUser([]byte(tc.auth))
			if user != tc.user || ok != tc.ok {
				t.Errorf("saslUser(%q) = %q, %t; want %q, %t", tc.auth, user, ok, tc.user, tc.ok)
			}
		})
	}
}
