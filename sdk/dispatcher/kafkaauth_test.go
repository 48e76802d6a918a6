package dispatcher_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

// syncBuffer is a log sink the engine's goroutines write to while the test reads.
type syncBuffer = syncbuf.Buffer

// problems records what the engine passes to OnKafkaProblem.
type problems struct {
	mu   sync.Mutex
	last *circuitstate.KafkaProblem
	seen []circuitstate.KafkaReason
}

func (p *problems) observe(k *circuitstate.KafkaProblem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = k
	if k != nil {
		p.seen = append(p.seen, k.Reason)
	}
}

func (p *problems) current() *circuitstate.KafkaProblem {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// saslPipeline is a pipeline whose consumer authenticates with SCRAM-SHA-256 as user, reading its
// password from a file the test rewrites.
type saslPipeline struct {
	c        *kfake.Cluster
	sink     *dt.Sink
	cfg      *config.Config
	prod     *kgo.Client
	password string // the password file
}

const mechanism = "SCRAM-SHA-256"

func newSASLPipeline(t *testing.T, group, user, password string, opts ...kfake.Opt) *saslPipeline {
	t.Helper()
	src, dlq := group+".src", group+".dlq"
	sink := dt.NewSink(t, nil)
	pol := simplePolicy(2, 50*time.Millisecond)
	probe := dt.Config(nil, group, src, dlq, pol, sink.URL)
	topics := map[string]int32{src: 1, dlq: 1}
	for _, n := range probe.Topics.Retries.Names() {
		topics[n] = 1
	}
	const admin, adminPass = "admin", "admin-Passw0rd"
	c := dt.Cluster(t, topics, append([]kfake.Opt{kfake.EnableSASL(), kfake.Superuser(mechanism, admin, adminPass)}, opts...)...)
	cfg := dt.Config(c.ListenAddrs(), group, src, dlq, pol, sink.URL)
	dir := t.TempDir()
	p := &saslPipeline{c: c, sink: sink, cfg: cfg, password: filepath.Join(dir, "password")}
	write(t, filepath.Join(dir, "username"), user)
	write(t, p.password, password)
	cfg.Kafka.SASL = &config.SASL{Mechanism: config.SASLScramSHA256, UsernameFile: filepath.Join(dir, "username"), PasswordFile: p.password}
	p.prod = dt.Client(t, c, kgo.SASL(scram.Auth{User: admin, Pass: adminPass}.AsSha256Mechanism()))
	return p
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, srv *dispatcher.Servers) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.HealthAddr().String() + dispatcher.PathReadyz)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAWrongPasswordIsReportedAndTheRightOneRecovers: the brokers refuse the consumer's password:
// it is not ready, /readyz says why, the failures are counted and the gauge is 1, the log holds the
// broker's error, and the problem goes to OnKafkaProblem. Once the right password is in the file
// (read at every authentication) it recovers without a restart and delivers.
func TestAWrongPasswordIsReportedAndTheRightOneRecovers(t *testing.T) {
	g := gomega.NewWithT(t)
	p := newSASLPipeline(t, "wrongpw", "consumer", "wrong-Passw0rd", kfake.Superuser(mechanism, "consumer", "right-Passw0rd"))
	logs := &syncBuffer{}
	var seen problems
	r := start(t, dispatcher.Options{
		Config:         p.cfg,
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
		OnKafkaProblem: seen.observe,
	})
	srv, err := dispatcher.Serve(config.Listen{HealthAddress: "127.0.0.1:0"}, r.e.Registry(), r.e, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })

	failures := func(reason string) float64 {
		return metricValue(t, r.e, metrics.KafkaConnectionFailuresTotal, reason)
	}
	failing := func() float64 {
		return metricValue(t, r.e, metrics.KafkaConnectionFailing, metrics.KafkaReasonAuthentication)
	}
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		ShouldNot(gomega.BeNil(), "the problem reported")
	k := seen.current()
	g.Expect(k.Reason).To(gomega.Equal(circuitstate.KafkaAuthentication))
	g.Expect(k.Message).To(gomega.ContainSubstring("SASL_AUTHENTICATION_FAILED"))
	g.Expect(r.e.Ready()).To(gomega.BeFalse())
	g.Expect(failures(metrics.KafkaReasonAuthentication)).To(gomega.BeNumerically(">=", 1))
	g.Expect(failing()).To(gomega.Equal(1.0))
	code, body := readyz(t, srv)
	g.Expect(code).To(gomega.Equal(http.StatusServiceUnavailable))
	g.Expect(body).To(gomega.HavePrefix("not ready: Kafka refuses the credentials (authentication) since "))
	g.Expect(body).To(gomega.ContainSubstring("SASL_AUTHENTICATION_FAILED"))
	g.Eventually(logs.String).Should(gomega.And(gomega.ContainSubstring(`"msg":"Kafka refuses the consumer"`),
		gomega.ContainSubstring(`"reason":"Authentication"`), gomega.ContainSubstring("SASL_AUTHENTICATION_FAILED"),
		gomega.ContainSubstring(`"broker":"`)), "the broker's error logged at warn")
	g.Expect(strings.Count(logs.String(), `"msg":"Kafka refuses the consumer"`)).To(gomega.BeNumerically("<=", 2),
		"the first failure of each place is logged, the repeats are not (within 30 s of the real clock)")

	write(t, p.password, "right-Passw0rd")
	g.Eventually(r.e.Ready).WithTimeout(30*time.Second).Should(gomega.BeTrue(), "ready with the right password")
	g.Expect(seen.current()).To(gomega.BeNil(), "the problem cleared")
	g.Expect(failing()).To(gomega.Equal(0.0))
	g.Expect(logs.String()).To(gomega.ContainSubstring(`"msg":"Kafka no longer refuses the consumer"`))
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("k"), Value: []byte("v")})
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool { n, _ := p.sink.Succeeded(); return n == 1 }, "the record delivered")
}

// TestAUserWithoutTheGroupsReadIsUnauthorized: the consumer authenticates but the ACLs grant it
// the topics and not its group: an authorization problem, not ready.
func TestAUserWithoutTheGroupsReadIsUnauthorized(t *testing.T) {
	g := gomega.NewWithT(t)
	const group = "noacl"
	p := newSASLPipeline(t, group, "consumer", "Passw0rd", kfake.EnableACLs(),
		kfake.User(mechanism, "consumer", "Passw0rd", kfake.ACL{
			Resource: kmsg.ACLResourceTypeTopic, Name: group + ".", Pattern: kmsg.ACLResourcePatternTypePrefixed,
			Operation: kmsg.ACLOperationAll, Allow: true,
		}))
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, OnKafkaProblem: seen.observe})
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		ShouldNot(gomega.BeNil(), "the problem reported")
	k := seen.current()
	g.Expect(k.Reason).To(gomega.Equal(circuitstate.KafkaAuthorization))
	g.Expect(k.Message).To(gomega.ContainSubstring("GROUP_AUTHORIZATION_FAILED"))
	g.Expect(r.e.Ready()).To(gomega.BeFalse())
	g.Expect(metricValue(t, r.e, metrics.KafkaConnectionFailuresTotal, metrics.KafkaReasonAuthorization)).
		To(gomega.BeNumerically(">=", 1))
	g.Expect(metricValue(t, r.e, metrics.KafkaConnectionFailuresTotal, metrics.KafkaReasonAuthentication)).
		To(gomega.Equal(0.0), "the password was right")
}

// metricValue is the value of the engine's metric name with label reason.
func metricValue(t *testing.T, e *dispatcher.Engine, name, reason string) float64 {
	t.Helper()
	fams, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelReason && l.GetValue() == reason {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s{reason=%q}", name, reason)
	return 0
}

// TestTheBrokersRefusalReachesTheLogAndTheReport: a broker that answers a refused password as
// Apache Kafka does (SASL_AUTHENTICATION_FAILED with its message; kfake closes the connection
// instead, so a control answers in its place): the message is the broker's, in the log, the
// report and /readyz.
func TestTheBrokersRefusalReachesTheLogAndTheReport(t *testing.T) {
	g := gomega.NewWithT(t)
	const kafkaMessage = "Authentication failed: Invalid username or password"
	p := newSASLPipeline(t, "refused", "consumer", "wrong-Passw0rd", kfake.Superuser("PLAIN", "consumer", "right-Passw0rd"))
	p.cfg.Kafka.SASL.Mechanism = config.SASLPlain
	p.c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		auth := req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes
		if parts := bytes.Split(auth, []byte{0}); len(parts) != 3 || string(parts[2]) != "wrong-Passw0rd" {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr(kafkaMessage)
		return resp, nil, true
	})
	logs := &syncBuffer{}
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), OnKafkaProblem: seen.observe})
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		ShouldNot(gomega.BeNil(), "the problem reported")
	g.Expect(seen.current().Message).To(gomega.ContainSubstring(kafkaMessage))
	g.Expect(r.e.NotReadyReason()).To(gomega.ContainSubstring(kafkaMessage))
	g.Eventually(logs.String).Should(gomega.ContainSubstring(kafkaMessage), "the broker's message logged")
}

// TestAJoinedConsumerRefusedItsCommitsIsNotReady: a consumer that joined and then has its commits
// refused by the group's ACLs is not ready until a commit succeeds again.
func TestAJoinedConsumerRefusedItsCommitsIsNotReady(t *testing.T) {
	g := gomega.NewWithT(t)
	p := newPipeline(t, "commitacl", 1, simplePolicy(2, 50*time.Millisecond), nil)
	var refuse sync.Mutex
	refusing := false
	p.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		refuse.Lock()
		defer refuse.Unlock()
		if !refusing {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, OnKafkaProblem: seen.observe})
	g.Eventually(r.e.Ready).WithTimeout(20 * time.Second).Should(gomega.BeTrue())
	refuse.Lock()
	refusing = true
	refuse.Unlock()
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("a")})
	g.Eventually(r.e.Ready).WithTimeout(20*time.Second).Should(gomega.BeFalse(), "not ready while commits are refused")
	g.Expect(seen.current()).To(gomega.HaveField("Reason", circuitstate.KafkaAuthorization))
	g.Expect(r.e.NotReadyReason()).To(gomega.ContainSubstring("GROUP_AUTHORIZATION_FAILED"))
	refuse.Lock()
	refusing = false
	refuse.Unlock()
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("b")})
	g.Eventually(r.e.Ready).WithTimeout(20*time.Second).Should(gomega.BeTrue(), "ready once a commit succeeds")
	g.Expect(seen.current()).To(gomega.BeNil())
}

// TestADeadLetterTopicTheACLsRefuseIsUnauthorized: the consumer may read its source and tiers and
// join its group but not write its dead letter topic (the one ACL a platform team forgets): the
// refused write is an authorization problem naming the broker's error, and the pod is not ready.
func TestADeadLetterTopicTheACLsRefuseIsUnauthorized(t *testing.T) {
	g := gomega.NewWithT(t)
	const group = "dlqacl"
	p := newSASLPipeline(t, group, "consumer", "Passw0rd", kfake.EnableACLs(),
		kfake.User(mechanism, "consumer", "Passw0rd",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: group + ".src", Pattern: kmsg.ACLResourcePatternTypePrefixed,
				Operation: kmsg.ACLOperationAll, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeGroup, Name: group, Pattern: kmsg.ACLResourcePatternTypeLiteral,
				Operation: kmsg.ACLOperationAll, Allow: true}))
	p.sink = dt.NewSink(t, func(*dt.Request) dt.Response { return dt.Response{Status: http.StatusBadRequest} })
	p.cfg.Sink.URL = p.sink.URL
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, OnKafkaProblem: seen.observe})
	g.Eventually(r.e.Ready).WithTimeout(20*time.Second).Should(gomega.BeTrue(), "the source and the group are allowed")
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("refused by the sink")})
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		Should(gomega.HaveField("Reason", circuitstate.KafkaAuthorization), "the refused dead-letter write reported")
	g.Expect(seen.current().Message).To(gomega.ContainSubstring("TOPIC_AUTHORIZATION_FAILED"))
	g.Expect(r.e.Ready()).To(gomega.BeFalse())
}
