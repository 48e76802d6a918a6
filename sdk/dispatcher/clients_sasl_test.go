package dispatcher_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// Issue 30: the pods of a pipeline on a secured default connection get the CA from their ConfigMap
// and the user either as a file of their Secret or, for a Strimzi KafkaUser's Secret that has no
// username key, as config kafka.sasl.username; the broker sees that user.
func TestConnectionOptionsTLSAndSCRAMUser(t *testing.T) {
	g := NewWithT(t)
	pki := kafkatest.NewPKI(t, "pods-ca")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(pki.ServerTLS(t)), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "admin", "admin-pass"),
		kfake.Superuser("SCRAM-SHA-512", "team-a-consumer", "consumer-pass"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var users []string
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if auth := req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes; bytes.HasPrefix(auth, []byte("n,")) {
			for _, f := range strings.Split(string(auth), ",") {
				if u, ok := strings.CutPrefix(f, "n="); ok {
					mu.Lock()
					users = append(users, u)
					mu.Unlock()
				}
			}
		}
		return nil, nil, false
	})
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(data), 0o600)).To(Succeed())
		return p
	}
	ca, pass, user := write("kafka-ca.crt", string(pki.CAPEM)), write("password", "consumer-pass\n"), write("username", "team-a-consumer")
	for _, sasl := range []*config.SASL{
		{Mechanism: config.SASLScramSHA512, Username: "team-a-consumer", PasswordFile: pass},
		{Mechanism: config.SASLScramSHA512, UsernameFile: user, PasswordFile: pass},
	} {
		opts, err := dispatcher.ConnectionOptions(&config.Kafka{BootstrapServers: c.ListenAddrs(),
			TLS: &config.TLS{CAFile: ca, ServerName: "127.0.0.1"}, SASL: sasl})
		g.Expect(err).NotTo(HaveOccurred())
		cl, err := kgo.NewClient(opts...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cl.Ping(context.Background())).To(Succeed())
		cl.Close()
	}
	// The CA and server name are checked: another CA's bundle, or a name the broker's certificate
	// does not carry, never connects (a client that skipped verification would).
	other := write("other-ca.crt", string(kafkatest.NewPKI(t, "someone-else").CAPEM))
	for name, tc := range map[string]*config.TLS{
		"another CA":          {CAFile: other, ServerName: "127.0.0.1"},
		"another server name": {CAFile: ca, ServerName: "kafka.elsewhere.test"},
	} {
		opts, err := dispatcher.ConnectionOptions(&config.Kafka{BootstrapServers: c.ListenAddrs(), TLS: tc,
			SASL: &config.SASL{Mechanism: config.SASLScramSHA512, Username: "team-a-consumer", PasswordFile: pass}})
		g.Expect(err).NotTo(HaveOccurred())
		cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0))...)
		g.Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = cl.Ping(ctx)
		cancel()
		cl.Close()
		g.Expect(err).To(HaveOccurred(), name)
		g.Expect(err.Error()).To(ContainSubstring("certificate"), name)
	}

	mu.Lock()
	defer mu.Unlock()
	g.Expect(users).NotTo(BeEmpty())
	for _, u := range users {
		g.Expect(u).To(Equal("team-a-consumer"), "the broker sees only the namespace's user")
	}
}
