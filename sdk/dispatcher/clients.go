package dispatcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
)

// newClients creates the consumer's client and, when the configuration has a separate
// deadLetterKafka connection, the dead-letter producer's (both connect lazily).
func (e *Engine) newClients(o Options) error {
	cfg := e.cfg
	conn, err := ConnectionOptions(&cfg.Kafka)
	if err != nil {
		return err
	}
	common := e.producerOptions()
	// The hooks see the connections of both clusters' clients: kafkahealth.go.
	hooks := []kgo.Opt{kgo.WithHooks(kafkaHooks{e: e})}
	if e.cl, err = kgo.NewClient(slices.Concat(conn, common, hooks, e.consumerOptions(), o.KafkaOptions)...); err != nil {
		return fmt.Errorf("creating the kafka client: %w", err)
	}
	// The solo producers write one record at a time (under aloneMu), each in a batch of its own:
	// what a batch rejected as too large is written again with, to tell which record is too large.
	if e.solo, err = kgo.NewClient(slices.Concat(conn, common, hooks, o.KafkaOptions)...); err != nil {
		e.cl.Close()
		return fmt.Errorf("creating the kafka client: %w", err)
	}
	e.dlq, e.dlqSolo = e.cl, e.solo
	if cfg.DeadLetterKafka == nil {
		return nil
	}
	dconn, err := ConnectionOptions(cfg.DeadLetterKafka)
	dhooks := []kgo.Opt{kgo.WithHooks(kafkaHooks{e: e, cluster: "deadLetter "})}
	if err == nil {
		e.dlq, err = kgo.NewClient(slices.Concat(dconn, common, dhooks, o.DeadLetterKafkaOptions)...)
		if err == nil {
			if e.dlqSolo, err = kgo.NewClient(slices.Concat(dconn, common, dhooks, o.DeadLetterKafkaOptions)...); err != nil {
				e.dlq.Close()
			}
		}
		if err != nil {
			err = fmt.Errorf("creating the dead-letter kafka client: %w", err)
		}
	}
	if err != nil {
		e.cl.Close()
		e.solo.Close()
		return err
	}
	e.ownDLQ = true
	return nil
}

// closeClients closes every Kafka client, leaving the group without waiting for a rebalance.
func (e *Engine) closeClients() {
	e.cl.CloseAllowingRebalance()
	e.solo.Close()
	if e.ownDLQ {
		e.dlq.Close()
		e.dlqSolo.Close()
	}
}

// producerOptions are the options both clients share: logging and how they produce.
func (e *Engine) producerOptions() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.WithLogger(kgoLogger{e.log.With("component", "kafka")}),
		kgo.ProducerLinger(0),
	}
	// franz-go's default batch size fits Kafka's default max.message.bytes. Only a maxRecordBytes
	// raised above the default (whose topics must then accept more) makes batches larger.
	if b := e.cfg.MaxRecordBytes; b > config.DefaultMaxRecordBytes {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(min(b+64<<10, 1<<30))))
	}
	return opts
}

// consumerOptions make the consumer's client a member of the pipeline's group, reading the source
// topic and every retry tier, committing by hand, and calling the engine on rebalances
// (rebalance.go).
func (e *Engine) consumerOptions() []kgo.Opt {
	g := e.cfg.Group
	opts := []kgo.Opt{
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(slices.Concat([]string{e.cfg.Topics.Source}, e.tierNames, e.drainNames)...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onLost),
	}
	if d := g.SessionTimeout; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.SessionTimeout(d.Duration))
	}
	if d := g.HeartbeatInterval; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.HeartbeatInterval(d.Duration))
	}
	if d := g.RebalanceTimeout; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.RebalanceTimeout(d.Duration))
	}
	if g.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(g.InstanceID))
	}
	return opts
}

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
			user := s.Username
			if s.UsernameFile != "" {
				u, err := os.ReadFile(s.UsernameFile)
				if err != nil {
					return "", "", fmt.Errorf("reading kafka sasl.usernameFile: %w", err)
				}
				user = string(u)
			}
			p, err := os.ReadFile(s.PasswordFile)
			if err != nil {
				return "", "", fmt.Errorf("reading kafka sasl.passwordFile: %w", err)
			}
			return strings.TrimRight(user, "\r\n"), strings.TrimRight(string(p), "\r\n"), nil
		}
		if _, _, err := creds(); err != nil {
			return nil, err
		}
		var m sasl.Mechanism
		switch s.Mechanism {
		case config.SASLPlain:
			m = plain.Plain(func(context.Context) (plain.Auth, error) {
				u, p, err := creds()
				return plain.Auth{User: u, Pass: p}, err
			})
		case config.SASLScramSHA256, config.SASLScramSHA512:
			fn := func(context.Context) (scram.Auth, error) {
				u, p, err := creds()
				return scram.Auth{User: u, Pass: p}, err
			}
			if s.Mechanism == config.SASLScramSHA256 {
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
	// An error's text may be a broker's message of any length: bounded as in kafkaFailed.
	kv := slices.Clone(keyvals)
	for i := 1; i < len(kv); i += 2 {
		if err, ok := kv[i].(error); ok {
			kv[i] = circuitstate.BoundMessage(err.Error())
		}
	}
	k.l.Log(context.Background(), lvl, msg, kv...)
}
