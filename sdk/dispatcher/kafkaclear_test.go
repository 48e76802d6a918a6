package dispatcher_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
)

// TestAFetchTheACLsRefuseIsUnauthorized: the consumer may read its source, write its dead letter
// topic and join its group, and may see its retry tier but not read it: the refused fetch is an
// authorization problem of that tier, reported and logged, and the pod is not ready while the
// source still delivers.
func TestAFetchTheACLsRefuseIsUnauthorized(t *testing.T) {
	g := gomega.NewWithT(t)
	const group = "fetchacl"
	allow := func(rt kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: name, Pattern: pat, Operation: op, Allow: true}
	}
	p := newSASLPipeline(t, group, "consumer", "Passw0rd", kfake.EnableACLs(),
		kfake.User(mechanism, "consumer", "Passw0rd",
			allow(kmsg.ACLResourceTypeTopic, group+".", kmsg.ACLResourcePatternTypePrefixed, kmsg.ACLOperationDescribe),
			allow(kmsg.ACLResourceTypeTopic, group+".src", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationAll),
			allow(kmsg.ACLResourceTypeTopic, group+".dlq", kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationAll),
			allow(kmsg.ACLResourceTypeGroup, group, kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLOperationAll)))
	tier := dt.TierTopics(p.cfg)[0]
	logs := &syncBuffer{}
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), OnKafkaProblem: seen.observe})
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		ShouldNot(gomega.BeNil(), "the refused fetch reported")
	g.Expect(seen.current().Reason).To(gomega.Equal(circuitstate.KafkaAuthorization))
	g.Expect(seen.current().Message).To(gomega.ContainSubstring("TOPIC_AUTHORIZATION_FAILED"))
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier}))
	g.Expect(r.e.Ready()).To(gomega.BeFalse())
	g.Eventually(func() []map[string]any { return logLines(t, logs.String(), "Kafka refuses the consumer") }).
		Should(gomega.ContainElement(gomega.And(gomega.HaveKeyWithValue("topic", tier), gomega.HaveKeyWithValue("reason", "Authorization"))))

	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("v")})
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool { n, _ := p.sink.Succeeded(); return n == 1 }, "the source delivered")
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier}), "records from the source do not clear the tier's refusal")
}

// TestAnAssignmentClearsTheGroupsProblem: the group refuses the consumer's first join; the next
// join is accepted and its assignment alone (nothing is consumed, so nothing is committed) clears
// the group's problem, and an assignment clears the fetch problems of the topics it assigns.
func TestAnAssignmentClearsTheGroupsProblem(t *testing.T) {
	g := gomega.NewWithT(t)
	p := newPipeline(t, "joinacl", 1, simplePolicy(2, 50*time.Millisecond), nil)
	var mu sync.Mutex
	joins := 0
	p.c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		if joins++; joins > 1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return resp, nil, true
	})
	var seen problems
	r := start(t, dispatcher.Options{Config: p.cfg, OnKafkaProblem: seen.observe})
	g.Eventually(func() []circuitstate.KafkaReason {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		return append([]circuitstate.KafkaReason(nil), seen.seen...)
	}).WithTimeout(20*time.Second).Should(gomega.ContainElement(circuitstate.KafkaAuthorization), "the refused join reported")
	g.Eventually(r.e.Ready).WithTimeout(20*time.Second).Should(gomega.BeTrue(), "ready once assigned")
	g.Expect(seen.current()).To(gomega.BeNil())
	g.Expect(r.e.KafkaPlaces()).To(gomega.BeEmpty())
	g.Expect(p.committed(t, p.cfg.Topics.Source, 0)).To(gomega.Equal(int64(-1)), "no commit cleared it")

	// An assignment also clears the refused fetches of the topics it assigns, and only those.
	tier := dt.TierTopics(p.cfg)[0]
	refused := fmt.Errorf("fetching: %w", kerr.TopicAuthorizationFailed)
	r.e.FetchError(tier, 0, refused)
	r.e.FetchError(p.cfg.Topics.Source, 0, refused)
	r.e.AssignPartitions(map[string][]int32{tier: {0}})
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + p.cfg.Topics.Source}))
}

// TestAConnectionClearsTheSeedsProblems: once franz-go knows the cluster it dials a seed only now
// and then, so a refused seed is cleared by a connection to any broker of its cluster; a known
// broker's problem is cleared only by a connection to it, and the other cluster's seeds only by a
// connection there.
func TestAConnectionClearsTheSeedsProblems(t *testing.T) {
	g := gomega.NewWithT(t)
	// Nothing listens at the brokers' address: the clients' own dials are refused, which is no
	// problem kept nor a connection, so only the test's calls of the hook count.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	sink := dt.NewSink(t, nil)
	cfg := dt.Config([]string{addr}, "seeds", "seeds.src", "seeds.dlq", simplePolicy(2, time.Second), sink.URL)
	r := start(t, dispatcher.Options{Config: cfg})
	tlsErr := fmt.Errorf("unable to dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})
	seed0, seed1 := int32(math.MinInt32), int32(math.MinInt32+1)
	r.e.BrokerConnect("", seed0, tlsErr)
	r.e.BrokerConnect("", seed1, tlsErr)
	r.e.BrokerConnect("", 1, tlsErr)
	r.e.BrokerConnect(dispatcher.DeadLetterCluster, seed0, tlsErr)
	dlSeed := fmt.Sprintf("broker deadLetter %d", seed0)
	g.Expect(r.e.KafkaPlaces()).To(gomega.ConsistOf(
		fmt.Sprintf("broker %d", seed0), fmt.Sprintf("broker %d", seed1), "broker 1", dlSeed))

	r.e.BrokerConnect("", 0, nil)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"broker 1", dlSeed}), "broker 0 clears its cluster's seeds")
	r.e.BrokerConnect("", 1, nil)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{dlSeed}))
	r.e.BrokerConnect(dispatcher.DeadLetterCluster, 2, nil)
	g.Expect(r.e.KafkaPlaces()).To(gomega.BeEmpty())
	g.Expect(r.e.KafkaProblem()).To(gomega.BeNil())
}

// TestTheBrokersErrorIsLoggedBounded: a broker's refusal carries a message of the broker's choosing,
// of any length and with control characters: the warning logs it bounded and cleaned as the
// report does.
func TestTheBrokersErrorIsLoggedBounded(t *testing.T) {
	g := gomega.NewWithT(t)
	kafkaMessage := "Authentication failed:\x1b[2J\n" + strings.Repeat("very long ", 2000)
	p := newSASLPipeline(t, "longrefusal", "consumer", "wrong-Passw0rd", kfake.Superuser("PLAIN", "consumer", "right-Passw0rd"))
	p.cfg.Kafka.SASL.Mechanism = config.SASLPlain
	p.c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr(kafkaMessage)
		return resp, nil, true
	})
	logs := &syncBuffer{}
	var seen problems
	start(t, dispatcher.Options{Config: p.cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil)), OnKafkaProblem: seen.observe})
	g.Eventually(func() *circuitstate.KafkaProblem { return seen.current() }).WithTimeout(20*time.Second).
		ShouldNot(gomega.BeNil(), "the problem reported")
	want := seen.current().Message
	g.Expect(want).To(gomega.And(gomega.HavePrefix("SASL_AUTHENTICATION_FAILED"), gomega.ContainSubstring("very long very long"),
		gomega.HaveSuffix("..."), gomega.Not(gomega.ContainSubstring("\x1b"))))
	g.Expect(len(want)).To(gomega.BeNumerically("<=", circuitstate.MaxKafkaMessage))
	g.Eventually(func() []map[string]any { return logLines(t, logs.String(), "Kafka refuses the consumer") }).
		Should(gomega.ContainElement(gomega.HaveKeyWithValue("error", want)), "the error logged as reported")
	g.Expect(logs.String()).NotTo(gomega.ContainSubstring(strings.Repeat("very long ", 100)), "nothing logs it unbounded")
}

// logLines returns the JSON log lines with message msg.
func logLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}
