package kafka

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net"
	"strconv"
	"strings"
)

// SASL mechanism names accepted in SASLConfig.Mechanism.
const (
	// MechanismPlain is SASL/PLAIN (username and password sent as is):
	// Validate refuses it without TLS unless SASLConfig.AllowPlaintext.
	MechanismPlain = "PLAIN"
	// MechanismScramSHA256 is SASL/SCRAM with SHA-256.
	MechanismScramSHA256 = "SCRAM-SHA-256"
	// MechanismScramSHA512 is SASL/SCRAM with SHA-512.
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// redacted replaces every secret in String, GoString and LogValue output.
const redacted = "<redacted>"

// Connection describes how to reach and authenticate to one Kafka cluster.
// It is a plain value with no Kubernetes types: the controller resolves
// Secrets into it. The zero value is invalid (no bootstrap servers).
//
// Connection implements fmt.Stringer, fmt.GoStringer and slog.LogValuer so
// that printing or logging it never reveals the password or private key.
type Connection struct {
	// BootstrapServers are the seed brokers as "host:port".
	BootstrapServers []string
	// TLS enables TLS when non-nil; nil means plaintext.
	TLS *TLSConfig
	// SASL enables SASL authentication when non-nil; nil means none.
	SASL *SASLConfig
	// ClientID is sent to the brokers with every request. Empty means
	// DefaultClientID.
	ClientID string
}

// TLSConfig is the TLS part of a Connection.
type TLSConfig struct {
	// CAPEM holds PEM encoded CA certificates used to verify the brokers.
	// Empty means the system roots.
	CAPEM []byte
	// CertPEM is an optional PEM encoded client certificate (mutual TLS).
	// It must be given together with KeyPEM.
	CertPEM []byte
	// KeyPEM is the PEM encoded private key for CertPEM. It is a secret.
	KeyPEM []byte
	// ServerName overrides the host name verified against the broker
	// certificates. Empty means the host of the broker being dialed.
	ServerName string
	// InsecureSkipVerify disables broker certificate verification. Use it
	// only for tests.
	InsecureSkipVerify bool
}

// SASLConfig is the SASL part of a Connection.
type SASLConfig struct {
	// Mechanism is one of MechanismPlain, MechanismScramSHA256 or
	// MechanismScramSHA512 (case-insensitive).
	Mechanism string
	// Username is the SASL user.
	Username string
	// Password is the SASL password. It is a secret: it is never printed,
	// logged or included in an error.
	Password string
	// AllowPlaintext allows MechanismPlain on a connection without TLS,
	// which sends the password in clear text; Validate refuses that
	// otherwise. It is a policy, not a way of connecting: Key ignores it.
	AllowPlaintext bool
}

// DefaultClientID is the client ID used when Connection.ClientID is empty.
const DefaultClientID = "retry-operator"

// Key returns a stable cache key for the connection: a SHA-256 digest over
// every field that says how to connect (not SASLConfig.AllowPlaintext, a
// policy checked by Validate), secrets included, so that changing any of them (for example a
// rotated password) yields a different key. The key is deterministic across
// processes. It reveals nothing readable, but since it is derived from the
// password it should not be published (in resource status, for example).
func (c Connection) Key() string {
	h := sha256.New()
	writeField(h, "retry-operator/kafka.Connection/v1")
	writeInt(h, len(c.BootstrapServers))
	for _, s := range c.BootstrapServers {
		writeField(h, s)
	}
	writeField(h, c.ClientID)
	if c.TLS == nil {
		writeField(h, "tls:none")
	} else {
		writeField(h, "tls")
		writeBytes(h, c.TLS.CAPEM)
		writeBytes(h, c.TLS.CertPEM)
		writeBytes(h, c.TLS.KeyPEM)
		writeField(h, c.TLS.ServerName)
		writeField(h, strconv.FormatBool(c.TLS.InsecureSkipVerify))
	}
	if c.SASL == nil {
		writeField(h, "sasl:none")
	} else {
		writeField(h, "sasl")
		writeField(h, c.SASL.MechanismName())
		writeField(h, c.SASL.Username)
		writeField(h, c.SASL.Password)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeField writes a length-prefixed string so that field boundaries are
// unambiguous ("ab"+"c" differs from "a"+"bc").
func writeField(h hash.Hash, s string) { writeBytes(h, []byte(s)) }

func writeBytes(h hash.Hash, b []byte) {
	writeInt(h, len(b))
	h.Write(b)
}

func writeInt(h hash.Hash, n int) {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(n))
	h.Write(buf[:])
}

// String returns a human readable description with secrets redacted.
func (c Connection) String() string {
	var b strings.Builder
	b.WriteString("Connection{bootstrap=[")
	b.WriteString(strings.Join(c.BootstrapServers, ","))
	b.WriteString("]")
	if c.ClientID != "" {
		b.WriteString(" clientID=")
		b.WriteString(c.ClientID)
	}
	if c.TLS != nil {
		b.WriteString(" tls=")
		b.WriteString(c.TLS.String())
	}
	if c.SASL != nil {
		b.WriteString(" sasl=")
		b.WriteString(c.SASL.String())
	}
	b.WriteString("}")
	return b.String()
}

// GoString implements fmt.GoStringer so that %#v does not print secrets.
func (c Connection) GoString() string { return c.String() }

// LogValue implements slog.LogValuer with secrets redacted.
func (c Connection) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Any("bootstrapServers", c.BootstrapServers)}
	if c.ClientID != "" {
		attrs = append(attrs, slog.String("clientID", c.ClientID))
	}
	if c.TLS != nil {
		attrs = append(attrs, slog.Any("tls", c.TLS.LogValue()))
	}
	if c.SASL != nil {
		attrs = append(attrs, slog.Any("sasl", c.SASL.LogValue()))
	}
	return slog.GroupValue(attrs...)
}

// String describes the TLS settings without the private key.
func (t *TLSConfig) String() string {
	if t == nil {
		return "none"
	}
	key := "none"
	if len(t.KeyPEM) > 0 {
		key = redacted
	}
	return fmt.Sprintf("{ca=%s clientCert=%s clientKey=%s serverName=%q insecureSkipVerify=%t}",
		presence(t.CAPEM), presence(t.CertPEM), key, t.ServerName, t.InsecureSkipVerify)
}

// GoString implements fmt.GoStringer so that %#v does not print the key.
func (t *TLSConfig) GoString() string { return t.String() }

// LogValue implements slog.LogValuer without the private key.
func (t *TLSConfig) LogValue() slog.Value {
	if t == nil {
		return slog.StringValue("none")
	}
	return slog.GroupValue(
		slog.Bool("ca", len(t.CAPEM) > 0),
		slog.Bool("clientCert", len(t.CertPEM) > 0),
		slog.Bool("clientKey", len(t.KeyPEM) > 0),
		slog.String("serverName", t.ServerName),
		slog.Bool("insecureSkipVerify", t.InsecureSkipVerify),
	)
}

// String describes the SASL settings with the password redacted.
func (s *SASLConfig) String() string {
	if s == nil {
		return "none"
	}
	pw := "none"
	if s.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("{mechanism=%s user=%q password=%s}", s.Mechanism, s.Username, pw)
}

// GoString implements fmt.GoStringer so that %#v does not print the password.
func (s *SASLConfig) GoString() string { return s.String() }

// LogValue implements slog.LogValuer with the password redacted.
func (s *SASLConfig) LogValue() slog.Value {
	if s == nil {
		return slog.StringValue("none")
	}
	return slog.GroupValue(
		slog.String("mechanism", s.Mechanism),
		slog.String("username", s.Username),
		slog.String("password", redacted),
	)
}

func presence(b []byte) string {
	if len(b) == 0 {
		return "none"
	}
	return "set"
}

// MechanismName is the mechanism normalised: upper case, without surrounding
// spaces (MechanismPlain, MechanismScramSHA256 or MechanismScramSHA512 when
// valid).
func (s *SASLConfig) MechanismName() string { return strings.ToUpper(strings.TrimSpace(s.Mechanism)) }

// Validate reports every problem with the connection at once (joined), or
// nil. It never includes a secret in its messages.
func (c Connection) Validate() error {
	var errs []error
	if len(c.BootstrapServers) == 0 {
		errs = append(errs, errors.New("no bootstrap servers: at least one host:port is required"))
	}
	for i, s := range c.BootstrapServers {
		host, port, err := net.SplitHostPort(strings.TrimSpace(s))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("bootstrap server %d %q is not host:port: %w", i, s, err))
		case host == "":
			errs = append(errs, fmt.Errorf("bootstrap server %d %q has an empty host", i, s))
		default:
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				errs = append(errs, fmt.Errorf("bootstrap server %d %q has an invalid port", i, s))
			}
		}
	}
	if c.TLS != nil {
		if _, err := c.TLS.Config(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SASL != nil {
		if err := c.SASL.validate(); err != nil {
			errs = append(errs, err)
		}
		if c.SASL.MechanismName() == MechanismPlain && c.TLS == nil && !c.SASL.AllowPlaintext {
			errs = append(errs, errors.New("SASL PLAIN without TLS would send the password in clear text: "+
				"enable TLS, use SCRAM-SHA-256 or SCRAM-SHA-512, or allow it explicitly "+
				"(plaintextPassword: Allow in spec.kafka.sasl; --kafka-allow-plaintext-password for the manager's default connection)"))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &ConfigError{Errs: errs}
}

// ConfigError is returned by Connection.Validate (and by Factory.Admin for an
// invalid Connection). It lists every problem found.
type ConfigError struct {
	// Errs are the individual problems.
	Errs []error
}

// Error joins the problems into one message prefixed by "invalid kafka
// connection".
func (e *ConfigError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	return "invalid kafka connection: " + strings.Join(msgs, "; ")
}

// Unwrap returns the individual problems.
func (e *ConfigError) Unwrap() []error { return e.Errs }

// Config returns the crypto/tls configuration of t, or every problem with its
// PEM data (joined).
func (t *TLSConfig) Config() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // explicit opt-in, documented as test only
	}
	var errs []error
	if len(t.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if err := appendPEMCerts(pool, t.CAPEM); err != nil {
			errs = append(errs, fmt.Errorf("TLS CA bundle: %w", err))
		} else {
			cfg.RootCAs = pool
		}
	}
	switch {
	case len(t.CertPEM) > 0 && len(t.KeyPEM) == 0:
		errs = append(errs, errors.New("TLS client certificate given without a private key"))
	case len(t.CertPEM) == 0 && len(t.KeyPEM) > 0:
		errs = append(errs, errors.New("TLS client private key given without a certificate"))
	case len(t.CertPEM) > 0:
		cert, err := tls.X509KeyPair(t.CertPEM, t.KeyPEM)
		if err != nil {
			// crypto/tls error texts describe the problem, never the
			// key material.
			errs = append(errs, fmt.Errorf("TLS client certificate/key pair is invalid: %w", err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// appendPEMCerts adds the certificates of the CA bundle data to pool, refusing anything but
// certificates (CABundle).
func appendPEMCerts(pool *x509.CertPool, data []byte) error {
	certs, err := parseCABundle(data)
	if err != nil {
		return err
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	return nil
}

// validate reports every problem with s (joined), or nil.
func (s *SASLConfig) validate() error {
	var errs []error
	if s.Username == "" {
		errs = append(errs, errors.New("SASL username is empty"))
	}
	if s.Password == "" {
		errs = append(errs, errors.New("SASL password is empty"))
	}
	switch s.MechanismName() {
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
	default:
		errs = append(errs, fmt.Errorf("unknown SASL mechanism %q (want %s, %s or %s)",
			s.Mechanism, MechanismPlain, MechanismScramSHA256, MechanismScramSHA512))
	}
	return errors.Join(errs...)
}
