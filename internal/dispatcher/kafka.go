package dispatcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
)

// ConnectionOptions returns the franz-go options that reach and authenticate to the cluster k:
// seed brokers, client id, TLS and SASL. Secrets are read from their files at every connection (a
// client certificate at every handshake, SASL credentials at every authentication), so a rotated
// Secret is picked up without a restart.
func ConnectionOptions(k *config.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.BootstrapServers...)}
	if k.ClientID != "" {
		opts = append(opts, kgo.ClientID(k.ClientID))
	}
	if t := k.TLS; t != nil {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading kafka tls.caFile: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka tls.caFile %s holds no PEM certificate", t.CAFile)
			}
			tc.RootCAs = pool
		}
		if t.CertFile != "" {
			certFile, keyFile := t.CertFile, t.KeyFile
			if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
				return nil, fmt.Errorf("loading kafka tls client certificate: %w", err)
			}
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				c, err := tls.LoadX509KeyPair(certFile, keyFile)
				if err != nil {
					return nil, err
				}
				return &c, nil
			}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := k.SASL; s != nil {
		creds := func() (string, string, error) {
			u, err := os.ReadFile(s.UsernameFile)
			if err != nil {
				return "", "", fmt.Errorf("reading kafka sasl.usernameFile: %w", err)
			}
			p, err := os.ReadFile(s.PasswordFile)
			if err != nil {
				return "", "", fmt.Errorf("reading kafka sasl.passwordFile: %w", err)
			}
			return strings.TrimRight(string(u), "\r\n"), strings.TrimRight(string(p), "\r\n"), nil
		}
		if _, _, err := creds(); err != nil {
			return nil, err
		}
		var m sasl.Mechanism
		switch s.Mechanism {
		case v1.SASLPlain:
			m = plain.Plain(func(context.Context) (plain.Auth, error) {
				u, p, err := creds()
				return plain.Auth{User: u, Pass: p}, err
			})
		case v1.SASLScramSHA256, v1.SASLScramSHA512:
			fn := func(context.Context) (scram.Auth, error) {
				u, p, err := creds()
				return scram.Auth{User: u, Pass: p}, err
			}
			if s.Mechanism == v1.SASLScramSHA256 {
				m = scram.Sha256(fn)
			} else {
				m = scram.Sha512(fn)
			}
		default:
			return nil, fmt.Errorf("unsupported kafka sasl.mechanism %q", s.Mechanism)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// kgoLogger adapts slog to franz-go's logger, at warn level and above (franz-go's info level is
// chatty about every connection).
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	var lvl slog.Level
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	case kgo.LogLevelInfo:
		lvl = slog.LevelInfo
	default:
		lvl = slog.LevelDebug
	}
	k.l.Log(context.Background(), lvl, msg, keyvals...)
}
