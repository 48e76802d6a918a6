package dispatcher

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// Kafka connection problems that retrying does not fix: the brokers refuse the credentials
// (authentication), the TLS handshake fails (tls), or an ACL refuses an operation (authorization).
// franz-go retries all of them forever, so without this a consumer with a wrong password looks
// merely idle.
//
// Each problem is kept under where it was seen: a broker (every connection attempt, SASL and TLS
// included: HookBrokerConnect), the group (the group session: HookGroupManageError; commits), a
// topic's fetches (the poll loop) or a topic's writes (produce.go). A success there clears it: a
// connection to that broker (any broker of the cluster for the seeds, which the client dials only
// now and then once it knows the cluster), an assignment or a commit (an assignment also clears
// its topics' fetches), records fetched from the topic, a write to it. Fetch and write problems
// also clear when not seen for kafkaProblemTTL: franz-go reports an idle topic's refusal only as
// often as it retries it, and no success may come to clear it.
//
// While any problem is kept the engine is not ready (/readyz says why), the metric of its reason
// is 1, and Options.OnKafkaProblem gets the worst (the pipeline's condition, through
// package circuitstate). Each problem is logged at warn when it starts and then at most every
// kafkaLogEvery while it lasts, with the number of failures not logged.
const (
	kafkaLogEvery   = 30 * time.Second
	kafkaProblemTTL = 2 * time.Minute
)

// classifyKafka returns the reason of an error that retrying does not fix, or "" for any other.
func classifyKafka(err error) circuitstate.KafkaReason {
	if err == nil {
		return ""
	}
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState),
		errors.Is(err, kerr.UnsupportedSaslMechanism):
		return circuitstate.KafkaAuthentication
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return circuitstate.KafkaAuthorization
	}
	// franz-go's guess at an immediate EOF: TLS on one side only, or SASL missing. Its kind is not
	// exported; its text says which.
	if fe, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		if strings.Contains(fe.Error(), "SASL") {
			return circuitstate.KafkaAuthentication
		}
		return circuitstate.KafkaTLS
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok { // TLS client, plaintext listener
		return circuitstate.KafkaTLS
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return circuitstate.KafkaTLS
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return circuitstate.KafkaTLS
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return circuitstate.KafkaTLS
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return circuitstate.KafkaTLS
	}
	// An alert the broker sent (a refused client certificate): crypto/tls wraps it, unexported,
	// in a net.OpError "remote error".
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "remote error" {
		return circuitstate.KafkaTLS
	}
	return ""
}

// kafkaProblem is one problem kept under its place.
type kafkaProblem struct {
	reason   circuitstate.KafkaReason
	message  string // the error, bounded
	attrs    []any  // where, for the log
	since    time.Time
	seen     time.Time // last failure
	loggedAt time.Time
	repeats  int  // failures since loggedAt
	expires  bool // cleared when not seen for kafkaProblemTTL
}

// kafkaTracker holds the problems: plain data, the engine guards it with kafkaMu.
type kafkaTracker struct {
	problems map[string]*kafkaProblem
}

// Log verdicts of fail.
const (
	kafkaLogNone = iota
	kafkaLogFirst
	kafkaLogAgain
)

// fail records a failure at where and says what to log; repeats is the failures not logged.
func (t *kafkaTracker) fail(where string, reason circuitstate.KafkaReason, message string, attrs []any, expires bool, now time.Time) (verdict, repeats int) {
	if t.problems == nil {
		t.problems = map[string]*kafkaProblem{}
	}
	p := t.problems[where]
	if p == nil || p.reason != reason {
		t.problems[where] = &kafkaProblem{reason: reason, message: message, attrs: attrs, since: now, seen: now, loggedAt: now, expires: expires}
		return kafkaLogFirst, 0
	}
	p.message, p.seen = message, now
	if now.Sub(p.loggedAt) < kafkaLogEvery {
		p.repeats++
		return kafkaLogNone, 0
	}
	repeats, p.repeats, p.loggedAt = p.repeats, 0, now
	return kafkaLogAgain, repeats
}

// clear removes the problems whose place matches and returns them.
func (t *kafkaTracker) clear(match func(where string, p *kafkaProblem) bool) []*kafkaProblem {
	var out []*kafkaProblem
	for w, p := range t.problems {
		if match(w, p) {
			out = append(out, p)
			delete(t.problems, w)
		}
	}
	return out
}

// worst is the problem to report: the worst reason, the earliest of it; nil when none.
func (t *kafkaTracker) worst() *circuitstate.KafkaProblem {
	var w *kafkaProblem
	for _, p := range t.problems {
		if w == nil || kafkaRank(p.reason) > kafkaRank(w.reason) ||
			(p.reason == w.reason && p.since.Before(w.since)) {
			w = p
		}
	}
	if w == nil {
		return nil
	}
	return &circuitstate.KafkaProblem{Reason: w.reason, Message: w.message, Since: w.since}
}

func kafkaRank(r circuitstate.KafkaReason) int {
	switch r {
	case circuitstate.KafkaAuthentication:
		return 3
	case circuitstate.KafkaTLS:
		return 2
	}
	return 1
}

// kafkaReasonIndex is the reason's index in metrics.KafkaReasons.
func kafkaReasonIndex(r circuitstate.KafkaReason) int {
	switch r {
	case circuitstate.KafkaAuthentication:
		return 0
	case circuitstate.KafkaTLS:
		return 1
	}
	return 2
}

// Places of problems.
const (
	whereGroup   = "group"
	wherePrefixB = "broker "
	wherePrefixF = "fetch "
	wherePrefixP = "produce "
)

// kafkaFailed records err at where when it is a problem retrying does not fix, and reports whether
// it was. attrs say where, for the log. The error is logged bounded as in the report: its text is
// the broker's, of any length.
func (e *Engine) kafkaFailed(where string, err error, expires bool, attrs ...any) bool {
	reason := classifyKafka(err)
	if reason == "" {
		return false
	}
	message := circuitstate.BoundMessage(err.Error())
	e.kafkaMu.Lock()
	verdict, repeats := e.kafka.fail(where, reason, message, attrs, expires, e.clock.Now())
	e.kafkaChangedLocked()
	e.kafkaMu.Unlock()
	e.m.KafkaFailures[kafkaReasonIndex(reason)].Inc()
	switch verdict {
	case kafkaLogFirst:
		e.log.Warn("Kafka refuses the consumer", append(attrs, "reason", string(reason), "error", message)...)
	case kafkaLogAgain:
		e.log.Warn("Kafka still refuses the consumer", append(attrs, "reason", string(reason), "error", message, "repeatsNotLogged", repeats)...)
	}
	return true
}

// kafkaOK clears the problems match selects, after a success. It costs an atomic load when there
// is none.
func (e *Engine) kafkaOK(match func(where string, p *kafkaProblem) bool) {
	if e.kafkaN.Load() == 0 {
		return
	}
	e.kafkaMu.Lock()
	cleared := e.kafka.clear(match)
	if len(cleared) > 0 {
		e.kafkaChangedLocked()
	}
	e.kafkaMu.Unlock()
	for _, p := range cleared {
		e.log.Info("Kafka no longer refuses the consumer", append(p.attrs, "reason", string(p.reason), "since", p.since)...)
	}
}

// kafkaOKAt clears the problem at where.
func (e *Engine) kafkaOKAt(where string) {
	e.kafkaOK(func(w string, _ *kafkaProblem) bool { return w == where })
}

// kafkaExpire clears the expiring problems not seen for kafkaProblemTTL (the poll loop calls it).
func (e *Engine) kafkaExpire() {
	now := e.clock.Now()
	e.kafkaOK(func(_ string, p *kafkaProblem) bool { return p.expires && now.Sub(p.seen) >= kafkaProblemTTL })
}

// kafkaChangedLocked updates the gauges and the report after the problems changed.
func (e *Engine) kafkaChangedLocked() {
	e.kafkaN.Store(int32(len(e.kafka.problems)))
	var failing [3]bool
	for _, p := range e.kafka.problems {
		failing[kafkaReasonIndex(p.reason)] = true
	}
	for i, f := range failing {
		v := 0.0
		if f {
			v = 1
		}
		e.m.KafkaFailing[i].Set(v)
	}
	if e.onKafka != nil {
		e.onKafka(e.kafka.worst())
	}
}

// KafkaProblem is the Kafka connection problem that keeps the engine not ready, nil when none.
func (e *Engine) KafkaProblem() *circuitstate.KafkaProblem {
	e.kafkaMu.Lock()
	defer e.kafkaMu.Unlock()
	return e.kafka.worst()
}

// kafkaHooks are the engine's franz-go hooks on the clients of one cluster.
type kafkaHooks struct {
	e       *Engine
	cluster string // "" for the source cluster, "deadLetter " for deadLetterKafka's
}

var (
	_ kgo.HookBrokerConnect    = kafkaHooks{}
	_ kgo.HookBrokerRead       = kafkaHooks{}
	_ kgo.HookGroupManageError = kafkaHooks{}
)

// keySASLAuthenticate is the SASLAuthenticate request's key.
const keySASLAuthenticate = 36

// OnBrokerRead sees a broker that closes the connection instead of answering a SASLAuthenticate
// request: how some brokers (kfake, older Kafka) refuse a user or password. Apache Kafka answers
// SASL_AUTHENTICATION_FAILED with its message, which OnBrokerConnect sees.
func (h kafkaHooks) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key != keySASLAuthenticate || !errors.Is(err, io.EOF) {
		return
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	refused := fmt.Errorf("%w: the broker closed the connection during SASL authentication (%w)", kerr.SaslAuthenticationFailed, err)
	h.e.kafkaFailed(wherePrefixB+h.cluster+strconv.Itoa(int(meta.NodeID)), refused, false, "broker", addr)
}

// OnBrokerConnect sees every connection attempt, the TLS handshake and SASL included.
func (h kafkaHooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	where := wherePrefixB + h.cluster + strconv.Itoa(int(meta.NodeID))
	if err != nil {
		addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
		h.e.kafkaFailed(where, err, false, "broker", addr)
		return
	}
	seeds := wherePrefixB + h.cluster + "-"
	h.e.kafkaOK(func(w string, _ *kafkaProblem) bool { return w == where || strings.HasPrefix(w, seeds) })
}

// OnGroupManageError sees the errors that end a group session (a refused join or heartbeat).
func (h kafkaHooks) OnGroupManageError(err error) {
	h.e.kafkaFailed(whereGroup, err, false)
}
