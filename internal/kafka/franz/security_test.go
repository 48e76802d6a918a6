package franz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// TestSASL proves, for SCRAM-SHA-512 and PLAIN, that a wrong password is an
// auth error (not "unreachable") whose text keeps the Kafka code and omits
// the password, that the right password works, and that changing the
// password changes Key() and yields a fresh client.
func TestSASL(t *testing.T) {
	c := newCluster(t,
		kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismScramSHA512, "admin", "admin-secret"),
		kfake.Superuser(kafka.MechanismPlain, "plain-admin", "plain-secret"),
	)
	for _, tc := range []struct{ mech, user, pass string }{
		{kafka.MechanismScramSHA512, "admin", "admin-secret"},
		{kafka.MechanismPlain, "plain-admin", "plain-secret"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			ctx := ctxT(t)
			f := NewFactory()
			t.Cleanup(f.Close)

			const wrongPass = "Wr0ng-P4ssw0rd-xyz"
			bad := kafka.Connection{BootstrapServers: c.ListenAddrs(), SASL: &kafka.SASLConfig{Mechanism: tc.mech, Username: tc.user, Password: wrongPass, AllowPlaintext: true}}
			badAdmin, err := f.Admin(ctx, bad)
			if err != nil {
				t.Fatal(err)
			}
			// A short caller deadline: kfake rejects credentials by closing
			// the connection, which franz-go retries until the deadline.
			shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err = badAdmin.Ping(shortCtx)
			t.Logf("wrong password: %v", err)
			if err == nil {
				t.Fatal("wrong password accepted")
			}
			if !kafka.IsAuthError(err) || kafka.IsUnreachable(err) || !errors.Is(err, kafka.ErrAuth) {
				t.Errorf("want auth error only, got kind %v: %v", kafka.KindOf(err), err)
			}
			if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
				t.Errorf("error lost the Kafka code: %v", err)
			}
			if strings.Contains(err.Error(), wrongPass) {
				t.Errorf("error contains the password: %v", err)
			}
			// Other methods classify the same way.
			shortCtx2, cancel2 := context.WithTimeout(ctx, 2*time.Second)
			defer cancel2()
			if _, err := badAdmin.DescribeTopics(shortCtx2, "x"); !kafka.IsAuthError(err) {
				t.Errorf("DescribeTopics with a wrong password: want auth error, got %v", err)
			}

			good := bad
			good.SASL = &kafka.SASLConfig{Mechanism: tc.mech, Username: tc.user, Password: tc.pass, AllowPlaintext: true}
			if good.Key() == bad.Key() {
				t.Fatal("changing the password did not change Key()")
			}
			goodAdmin, err := f.Admin(ctx, good)
			if err != nil {
				t.Fatal(err)
			}
			if goodAdmin == badAdmin || goodAdmin.(*kadmAdmin).cl == badAdmin.(*kadmAdmin).cl {
				t.Fatal("a new password reused the old client")
			}
			if err := goodAdmin.Ping(ctx); err != nil {
				t.Fatalf("right password: %v", err)
			}
			topic := "sasl-" + strings.ToLower(tc.mech)
			if err := goodAdmin.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
				t.Fatalf("CreateTopic as superuser: %v", err)
			}
			if f.Len() != 2 {
				t.Errorf("want 2 cached clients, got %d", f.Len())
			}
			if !f.Forget(bad.Key()) || f.Len() != 1 {
				t.Errorf("Forget(old key) did not drop the stale client")
			}
			if err := badAdmin.Ping(ctx); !errors.Is(err, kafka.ErrClosed) {
				t.Errorf("forgotten admin: want kafka.ErrClosed, got %v", err)
			}
		})
	}

	t.Run("no SASL against a SASL cluster", func(t *testing.T) {
		a, _ := newAdmin(t, plainConn(c), WithRequestTimeout(10*time.Second))
		err := a.Ping(ctxT(t))
		if !kafka.IsAuthError(err) || kafka.IsUnreachable(err) {
			t.Fatalf("want auth error, got kind %v: %v", kafka.KindOf(err), err)
		}
	})
}

// TestACLAuthorization proves that broker authorization failures (ACLs) are
// auth errors carrying TOPIC/CLUSTER_AUTHORIZATION_FAILED.
func TestACLAuthorization(t *testing.T) {
	c := newCluster(t,
		kfake.EnableSASL(),
		kfake.EnableACLs(),
		kfake.Superuser(kafka.MechanismScramSHA512, "admin", "admin-secret"),
		kfake.User(kafka.MechanismScramSHA512, "app", "app-secret", kfake.ACL{
			Resource: kmsg.ACLResourceTypeTopic, Name: "app.", Pattern: kmsg.ACLResourcePatternTypePrefixed,
			Operation: kmsg.ACLOperationAll, Allow: true,
		}),
		kfake.SeedTopics(1, "private", "app.events"),
	)
	a, _ := newAdmin(t, kafka.Connection{BootstrapServers: c.ListenAddrs(), SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "app", Password: "app-secret"}})
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("Ping as app: %v", err)
	}
	got, err := a.DescribeTopics(ctx, "app.events")
	if err != nil || !got["app.events"].Exists {
		t.Fatalf("describe an allowed topic: %+v, %v", got, err)
	}
	_, err = a.DescribeTopics(ctx, "private")
	if !kafka.IsAuthError(err) || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("describe a denied topic: want TOPIC_AUTHORIZATION_FAILED auth error, got %v", err)
	}
	if err := a.CreateTopic(ctx, "private2", 1, 1, nil); !kafka.IsAuthError(err) {
		t.Fatalf("create a denied topic: want auth error, got %v", err)
	}
	if err := a.CreateTopic(ctx, "app.new", 1, 1, nil); err != nil {
		t.Fatalf("create an allowed topic: %v", err)
	}
	if err := a.DeleteTopic(ctx, "private"); !kafka.IsAuthError(err) {
		t.Fatalf("delete a denied topic: want auth error, got %v", err)
	}
	if _, err := a.GroupLag(ctx, "some-group"); !kafka.IsAuthError(err) || !strings.Contains(err.Error(), "GROUP_AUTHORIZATION_FAILED") {
		t.Fatalf("lag of a denied group: want GROUP_AUTHORIZATION_FAILED, got %v", err)
	}
}

// TestTLS proves a connection with CAPEM verifies a kfake TLS listener
// (cert signed by a CA generated here), that a wrong CA is a TLS error, that
// plaintext against TLS fails clearly, and that mutual TLS with CertPEM /
// KeyPEM works.
func TestTLS(t *testing.T) {
	pki := kafkatest.NewPKI(t, "test-ca")
	c := newCluster(t, kfake.TLS(pki.ServerTLS(t)))
	ctx := ctxT(t)

	a, _ := newAdmin(t, kafka.Connection{BootstrapServers: c.ListenAddrs(), TLS: &kafka.TLSConfig{CAPEM: pki.CAPEM}})
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("TLS ping: %v", err)
	}
	if err := a.CreateTopic(ctx, "over-tls", 2, 1, nil); err != nil {
		t.Fatalf("TLS CreateTopic: %v", err)
	}
	if got, err := a.DescribeTopics(ctx, "over-tls"); err != nil || got["over-tls"].Partitions != 2 {
		t.Fatalf("TLS DescribeTopics: %+v %v", got, err)
	}

	other := kafkatest.NewPKI(t, "other-ca")
	wrong, _ := newAdmin(t, kafka.Connection{BootstrapServers: c.ListenAddrs(), TLS: &kafka.TLSConfig{CAPEM: other.CAPEM}}, WithRequestTimeout(10*time.Second))
	err := wrong.Ping(ctx)
	if !kafka.IsTLSError(err) || kafka.IsAuthError(err) {
		t.Fatalf("wrong CA: want TLS error, got kind %v: %v", kafka.KindOf(err), err)
	}
	var uae x509.UnknownAuthorityError
	if !errors.As(err, &uae) {
		t.Errorf("wrong CA: x509.UnknownAuthorityError not reachable through %v", err)
	}

	plain, _ := newAdmin(t, plainConn(c), WithRequestTimeout(10*time.Second))
	if err := plain.Ping(ctx); err == nil {
		t.Fatal("plaintext against a TLS listener succeeded")
	} else {
		t.Logf("plaintext against TLS: kind %v: %v", kafka.KindOf(err), err)
	}

	// Mutual TLS: the broker requires a client certificate from the CA.
	serverCfg := pki.ServerTLS(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.CAPEM)
	serverCfg.ClientCAs = pool
	serverCfg.ClientAuth = tls.RequireAndVerifyClientCert
	m := newCluster(t, kfake.TLS(serverCfg))
	certPEM, keyPEM := pki.Issue(t, "retry-operator", false)
	mtls, _ := newAdmin(t, kafka.Connection{BootstrapServers: m.ListenAddrs(), TLS: &kafka.TLSConfig{CAPEM: pki.CAPEM, CertPEM: certPEM, KeyPEM: keyPEM}})
	if err := mtls.Ping(ctx); err != nil {
		t.Fatalf("mTLS ping: %v", err)
	}
	noCert, _ := newAdmin(t, kafka.Connection{BootstrapServers: m.ListenAddrs(), TLS: &kafka.TLSConfig{CAPEM: pki.CAPEM}}, WithRequestTimeout(10*time.Second))
	if err := noCert.Ping(ctx); err == nil {
		t.Fatal("mTLS broker accepted a client without certificate")
	} else {
		t.Logf("mTLS without client cert: kind %v: %v", kafka.KindOf(err), err)
	}
}

// TestUnreachable proves a refused port, a closed kfake cluster and a
// listener that never answers all fail within the request timeout with
// IsUnreachable, and that the caller's own deadline is honoured too.
func TestUnreachable(t *testing.T) {
	const timeout = 750 * time.Millisecond

	refused := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}(t)

	closed := kfakeAddrThenClose(t)

	// A listener that accepts and reads but never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { silent.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_, _ = io.Copy(io.Discard, conn)
			}()
		}
	}()

	for name, addr := range map[string]string{"refused port": refused, "closed kfake": closed, "silent broker": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			a, _ := newAdmin(t, kafka.Connection{BootstrapServers: []string{addr}}, WithRequestTimeout(timeout))
			for op, call := range map[string]func() error{
				"Ping":           func() error { return a.Ping(context.Background()) },
				"DescribeTopics": func() error { _, err := a.DescribeTopics(context.Background(), "t"); return err },
				"CreateTopic":    func() error { return a.CreateTopic(context.Background(), "t", 1, 1, nil) },
			} {
				err := call()
				t.Logf("%s: %v", op, err)
				if !kafka.IsUnreachable(err) || kafka.IsAuthError(err) || !errors.Is(err, kafka.ErrUnreachable) {
					t.Errorf("%s: want unreachable, got kind %v: %v", op, kafka.KindOf(err), err)
				}
				// The silent broker's call ends by the request timeout (the test's own -timeout
				// catches a call that never ends), and says so.
				if name == "silent broker" && !strings.Contains(err.Error(), "no answer from "+addr) {
					t.Errorf("%s: want the request timeout's error, got %v", op, err)
				}
				if !strings.Contains(err.Error(), addr) {
					t.Errorf("%s: error does not name the broker %s: %v", op, addr, err)
				}
			}
		})
	}

	t.Run("caller deadline shorter than the timeout", func(t *testing.T) {
		a, _ := newAdmin(t, kafka.Connection{BootstrapServers: []string{silent.Addr().String()}}, WithRequestTimeout(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := a.Ping(ctx)
		// Ended by the caller's deadline, not by the minute's request timeout: the error says so.
		if !kafka.IsUnreachable(err) || !strings.Contains(err.Error(), "before the context deadline") || strings.Contains(err.Error(), "request timeout") {
			t.Errorf("want unreachable (context deadline), got %v", err)
		}
	})
}

// kfakeAddrThenClose starts a cluster, returns its address and closes it.
func kfakeAddrThenClose(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	addr := c.ListenAddrs()[0]
	c.Close()
	return addr
}
