package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

func fullConn(t *testing.T) Connection {
	t.Helper()
	pki := kafkatest.NewPKI(t, "ca")
	certPEM, keyPEM := pki.Issue(t, "client", false)
	return Connection{
		BootstrapServers: []string{"b1:9092", "b2:9092"},
		TLS:              &TLSConfig{CAPEM: pki.CAPEM, CertPEM: certPEM, KeyPEM: keyPEM, ServerName: "kafka.example"},
		SASL:             &SASLConfig{Mechanism: MechanismScramSHA512, Username: "svc", Password: "s3cr3t-Passw0rd"},
		ClientID:         "op",
	}
}

// TestConnectionKey proves Key is deterministic and changes when any single
// field (secrets included) changes.
func TestConnectionKey(t *testing.T) {
	base := fullConn(t)
	clone := func() Connection {
		c := base
		c.BootstrapServers = append([]string(nil), base.BootstrapServers...)
		tlsCopy := *base.TLS
		saslCopy := *base.SASL
		c.TLS, c.SASL = &tlsCopy, &saslCopy
		return c
	}
	if k1, k2 := base.Key(), clone().Key(); k1 != k2 {
		t.Fatalf("equal connections have different keys %s %s", k1, k2)
	}
	if len(base.Key()) != 64 {
		t.Fatalf("key %q is not a hex SHA-256", base.Key())
	}
	mutations := map[string]func(*Connection){
		"servers":        func(c *Connection) { c.BootstrapServers = []string{"b1:9092"} },
		"server order":   func(c *Connection) { c.BootstrapServers = []string{"b2:9092", "b1:9092"} },
		"server concat":  func(c *Connection) { c.BootstrapServers = []string{"b1:9092b2:9092"} },
		"client id":      func(c *Connection) { c.ClientID = "other" },
		"no tls":         func(c *Connection) { c.TLS = nil },
		"ca":             func(c *Connection) { c.TLS.CAPEM = append([]byte("x"), c.TLS.CAPEM...) },
		"cert":           func(c *Connection) { c.TLS.CertPEM = nil },
		"key":            func(c *Connection) { c.TLS.KeyPEM = append([]byte("x"), c.TLS.KeyPEM...) },
		"server name":    func(c *Connection) { c.TLS.ServerName = "other" },
		"insecure":       func(c *Connection) { c.TLS.InsecureSkipVerify = true },
		"no sasl":        func(c *Connection) { c.SASL = nil },
		"mechanism":      func(c *Connection) { c.SASL.Mechanism = MechanismScramSHA256 },
		"user":           func(c *Connection) { c.SASL.Username = "svc2" },
		"password":       func(c *Connection) { c.SASL.Password = "s3cr3t-Passw0rd2" },
		"user/pass skew": func(c *Connection) { c.SASL.Username, c.SASL.Password = "svcs", "3cr3t-Passw0rd" },
	}
	seen := map[string]string{base.Key(): "base"}
	for name, mutate := range mutations {
		c := clone()
		mutate(&c)
		k := c.Key()
		if prev, dup := seen[k]; dup {
			t.Errorf("mutation %q has the same key as %q", name, prev)
		}
		seen[k] = name
	}
	// Mechanism spelling is normalised: same mechanism, same key.
	c := clone()
	c.SASL.Mechanism = "scram-sha-512"
	if c.Key() != base.Key() {
		t.Errorf("lower-case mechanism changed the key")
	}
}

// TestConnectionRedaction proves no printing path reveals the password or
// the private key.
func TestConnectionRedaction(t *testing.T) {
	c := fullConn(t)
	keyLine := strings.Split(string(c.TLS.KeyPEM), "\n")[1]
	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("connect", "conn", c, "sasl", c.SASL, "tls", c.TLS)
	outputs := map[string]struct{ out, mustHave string }{
		"String": {c.String(), "b1:9092"},
		"%v":     {fmt.Sprintf("%v", c), "b1:9092"},
		"%+v":    {fmt.Sprintf("%+v", c), "b1:9092"},
		"%#v":    {fmt.Sprintf("%#v", c), "b1:9092"},
		"ptr %v": {fmt.Sprintf("%v", &c), "b1:9092"},
		"sasl":   {fmt.Sprintf("%v %+v %#v", c.SASL, c.SASL, c.SASL), `"svc"`},
		"tls":    {fmt.Sprintf("%v %+v %#v", c.TLS, c.TLS, c.TLS), "kafka.example"},
		"slog":   {logBuf.String(), "b1:9092"},
	}
	for name, o := range outputs {
		if strings.Contains(o.out, c.SASL.Password) {
			t.Errorf("%s output contains the password: %s", name, o.out)
		}
		if strings.Contains(o.out, keyLine) {
			t.Errorf("%s output contains the private key: %s", name, o.out)
		}
		if !strings.Contains(o.out, o.mustHave) {
			t.Errorf("%s output lost the non-secret fields (%s): %s", name, o.mustHave, o.out)
		}
	}
	if !strings.Contains(c.String(), redacted) {
		t.Errorf("String does not mark the redaction: %s", c.String())
	}
}

// TestConnectionValidate proves each kind of invalid input is reported with
// a clear message and valid input passes.
func TestConnectionValidate(t *testing.T) {
	good := fullConn(t)
	if err := good.Validate(); err != nil {
		t.Fatalf("valid connection rejected: %v", err)
	}
	if err := (Connection{BootstrapServers: []string{"localhost:9092"}}).Validate(); err != nil {
		t.Fatalf("minimal connection rejected: %v", err)
	}
	// SASL PLAIN is accepted over TLS, and without TLS only when allowed explicitly.
	for name, conn := range map[string]Connection{
		"PLAIN over TLS":             {BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}},
		"PLAIN allowed in plaintext": {BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p", AllowPlaintext: true}},
		"SCRAM without TLS":          {BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: MechanismScramSHA256, Username: "u", Password: "p"}},
	} {
		if err := conn.Validate(); err != nil {
			t.Errorf("%s rejected: %v", name, err)
		}
	}
	cases := []struct {
		name string
		conn Connection
		want []string
	}{
		{"no servers", Connection{}, []string{"no bootstrap servers"}},
		{"no port", Connection{BootstrapServers: []string{"kafka"}}, []string{`bootstrap server 0 "kafka" is not host:port`}},
		{"bad port", Connection{BootstrapServers: []string{"kafka:99999"}}, []string{"invalid port"}},
		{"empty host", Connection{BootstrapServers: []string{":9092"}}, []string{"empty host"}},
		{"unknown mechanism", Connection{BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: "hunter2-secret"}},
			[]string{`unknown SASL mechanism "GSSAPI"`}},
		{"empty user", Connection{BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: "PLAIN", Password: "hunter2-secret"}}, []string{"SASL username is empty"}},
		{"empty password", Connection{BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: "PLAIN", Username: "u"}}, []string{"SASL password is empty"}},
		{"garbage CA", Connection{BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{CAPEM: []byte("not a pem")}}, []string{"TLS CA bundle: no PEM encoded certificate found"}},
		{"key as CA", Connection{BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{CAPEM: good.TLS.KeyPEM}}, []string{`unexpected PEM block "EC PRIVATE KEY"`}},
		{"cert without key", Connection{BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{CertPEM: good.TLS.CertPEM}}, []string{"client certificate given without a private key"}},
		{"key without cert", Connection{BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{KeyPEM: good.TLS.KeyPEM}}, []string{"private key given without a certificate"}},
		{"mismatched pair", Connection{BootstrapServers: []string{"k:1"}, TLS: &TLSConfig{CertPEM: good.TLS.CAPEM, KeyPEM: good.TLS.KeyPEM}}, []string{"certificate/key pair is invalid"}},
		{"PLAIN without TLS", Connection{BootstrapServers: []string{"k:1"}, SASL: &SASLConfig{Mechanism: "plain", Username: "u", Password: "hunter2-secret"}},
			[]string{"SASL PLAIN without TLS would send the password in clear text", "plaintextPassword: Allow", "--kafka-allow-plaintext-password"}},
		{"several", Connection{SASL: &SASLConfig{Mechanism: "X", Username: "u", Password: "hunter2-secret"}}, []string{"no bootstrap servers", "unknown SASL mechanism"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.conn.Validate()
			if err == nil {
				t.Fatal("expected an error")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2-secret") {
				t.Errorf("error contains the password: %q", err)
			}
		})
	}
}
