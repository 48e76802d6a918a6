package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/retryops/retry-operator/sdk/policy"
)

// ValidationError lists every problem Validate found, each naming the field (and the environment
// variable that sets it, where there is one).
type ValidationError struct {
	// Problems holds one message per problem, in field order; never empty.
	Problems []string
}

// Error joins the problems with "; ".
func (e *ValidationError) Error() string {
	return "invalid dispatcher configuration: " + strings.Join(e.Problems, "; ")
}

// defaultRebalanceTimeout is franz-go's default rebalance timeout.
const defaultRebalanceTimeout = 60 * time.Second

// maxUsername bounds kafka.sasl.username.
const maxUsername = 256

var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// Validate checks the configuration (after Default) and returns a *ValidationError listing every
// problem, or nil. It checks that the files it names exist, so a missing Secret mount is reported
// at start rather than at the first connection.
func (c *Config) Validate() error {
	var p problems
	if _, err := checkVersion(c.Version); err != nil {
		p.add("%v", err)
	}
	if c.ConsumerGroup == "" {
		p.add("consumerGroup (%s) is required (or pipeline.namespace and pipeline.name, which default it)", EnvConsumerGroup)
	}
	validateKafka(&p, "kafka", &c.Kafka, true)
	if c.DeadLetterKafka != nil {
		validateKafka(&p, "deadLetterKafka", c.DeadLetterKafka, false)
	}

	validTopic := func(field, env, name string) bool {
		switch {
		case name == "":
			if env != "" {
				p.add("%s (%s) is required", field, env)
			} else {
				p.add("%s is required", field)
			}
			return false
		case !topicRE.MatchString(name) || name == "." || name == "..":
			p.add("%s %q is not a Kafka topic name (1 to 249 of a-z A-Z 0-9 . _ -)", field, name)
			return false
		}
		return true
	}
	validTopic("topics.source", EnvTopicPrimary, c.Topics.Source)
	validTopic("topics.deadLetter", EnvTopicDLQ, c.Topics.DeadLetter)
	consumed := map[string]string{c.Topics.Source: "topics.source"}
	for i, t := range c.Topics.Retries {
		field := fmt.Sprintf("topics.retries[%d].name", i)
		if !validTopic(field, "", t.Name) {
			continue
		}
		if other, dup := consumed[t.Name]; dup {
			p.add("%s %q is also %s; every consumed topic must be distinct", field, t.Name, other)
		}
		consumed[t.Name] = field
		for j, a := range t.Attempts {
			if a < 2 {
				p.add("topics.retries[%d].attempts[%d] %d must be at least 2 (attempt 1 is the first delivery, from the source topic)", i, j, a)
			}
		}
	}
	if len(c.Topics.Draining) > MaxDrainingTiers {
		p.add("topics.draining lists %d topics; at most %d", len(c.Topics.Draining), MaxDrainingTiers)
	}
	for i, name := range c.Topics.Draining {
		field := fmt.Sprintf("topics.draining[%d]", i)
		if !validTopic(field, "", name) {
			continue
		}
		if other, dup := consumed[name]; dup {
			p.add("%s %q is also %s; every consumed topic must be distinct", field, name, other)
		}
		consumed[name] = field
	}
	if other, dup := consumed[c.Topics.DeadLetter]; dup && c.Topics.DeadLetter != "" && c.DeadLetterKafka == nil {
		p.add("topics.deadLetter %q is also %s: dead letters would be consumed again", c.Topics.DeadLetter, other)
	}

	if c.Policy == nil {
		p.add("policy is required")
	} else if comp, err := c.Compile(); err != nil {
		p.add("policy: %v", err)
	} else if comp.MaxAttempts() > 1 {
		if len(c.Topics.Retries) == 0 {
			p.add("topics.retries (%s) is required: the policy allows %d deliveries, so retries need a tier", EnvTopicRetry, comp.MaxAttempts())
		} else if _, ok := c.Topics.Retries.For(2); !ok {
			p.add("topics.retries: no tier holds attempt 2 (the first retry)")
		}
	}

	if c.Sink != nil {
		u, err := url.Parse(c.Sink.URL)
		if c.Sink.URL == "" {
			p.add("sink.url (%s) is empty", EnvSinkURL)
		} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("sink.url (%s) %q must be an absolute http:// or https:// URL", EnvSinkURL, c.Sink.URL)
		}
	}

	switch c.Delivery.Ordering {
	case OrderingOrdered, OrderingUnordered:
	default:
		p.add("delivery.ordering %q must be Ordered or Unordered", c.Delivery.Ordering)
	}
	if c.Delivery.MaxInFlight < 1 || c.Delivery.MaxInFlight > 10000 {
		p.add("delivery.maxInFlight %d must be between 1 and 10000", c.Delivery.MaxInFlight)
	}
	if b := c.Delivery.Batch; b != nil {
		if b.MaxRecords < 1 || b.MaxRecords > MaxBatchRecords {
			p.add("delivery.batch.maxRecords %d must be between 1 and %d", b.MaxRecords, MaxBatchRecords)
		}
		if b.MaxBytes < 1 || b.MaxBytes > MaxBatchBytes {
			p.add("delivery.batch.maxBytes %d must be between 1 and %d", b.MaxBytes, MaxBatchBytes)
		}
		if b.MaxWait != nil && (b.MaxWait.Duration < 0 || b.MaxWait.Duration > MaxBatchWait) {
			p.add("delivery.batch.maxWait %s must be between 0s and %s", b.MaxWait.Duration, MaxBatchWait)
		}
	}
	if c.Delivery.MaxBufferedRecords < 1 {
		p.add("delivery.maxBufferedRecords %d must be at least 1", c.Delivery.MaxBufferedRecords)
	}
	if c.Delivery.MaxUncommittedRecords < 0 {
		p.add("delivery.maxUncommittedRecords %d must not be negative (0 means the default)", c.Delivery.MaxUncommittedRecords)
	}
	if c.MaxRecordBytes < 1 {
		p.add("maxRecordBytes %d must be at least 1", c.MaxRecordBytes)
	}
	for _, d := range []struct {
		field string
		d     *policy.Duration
	}{
		{"commitInterval", c.CommitInterval},
		{"drainTimeout", c.DrainTimeout},
		{"group.sessionTimeout", c.Group.SessionTimeout},
		{"group.heartbeatInterval", c.Group.HeartbeatInterval},
		{"group.rebalanceTimeout", c.Group.RebalanceTimeout},
	} {
		if d.d != nil && d.d.Duration < 0 {
			p.add("%s %v must not be negative", d.field, d.d.Duration)
		}
	}
	if drain, rebalance := Dur(c.DrainTimeout, DefaultDrainTimeout), Dur(c.Group.RebalanceTimeout, defaultRebalanceTimeout); drain >= rebalance {
		p.add("drainTimeout %v must be less than group.rebalanceTimeout %v: a revoked partition drains within the rebalance", drain, rebalance)
	}
	for _, a := range []struct{ field, addr string }{
		{"listen.metricsAddress", c.Listen.MetricsAddress},
		{"listen.healthAddress", c.Listen.HealthAddress},
	} {
		if a.addr == Disabled || a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			p.add("%s %q must be host:port, :port or %q to disable it", a.field, a.addr, Disabled)
		}
	}
	if r := c.CircuitReport; r != nil {
		if errs := dns1123Subdomain(r.ConfigMap); len(errs) > 0 {
			p.add("circuitReport.configMap %q is not a ConfigMap name: %s", r.ConfigMap, strings.Join(errs, "; "))
		}
		if c.Pipeline.Namespace == "" {
			p.add("circuitReport needs pipeline.namespace, the ConfigMap's namespace")
		}
		if r.Interval != nil && r.Interval.Duration <= 0 {
			p.add("circuitReport.interval %v must be positive", r.Interval.Duration)
		}
	}
	if len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}

func validateKafka(p *problems, prefix string, k *Kafka, fromEnv bool) {
	if len(k.BootstrapServers) == 0 {
		if fromEnv {
			p.add("%s.bootstrapServers (%s) is required", prefix, EnvBootstrapServers)
		} else {
			p.add("%s.bootstrapServers is required", prefix)
		}
	}
	for i, s := range k.BootstrapServers {
		if host, port, err := net.SplitHostPort(s); err != nil || host == "" || port == "" {
			p.add("%s.bootstrapServers[%d] %q must be host:port", prefix, i, s)
		}
	}
	file := func(field, path string) {
		if path == "" {
			return
		}
		if _, err := os.Stat(path); err != nil {
			p.add("%s %q cannot be read (is the Secret mounted?): %v", field, path, err)
		}
	}
	if t := k.TLS; t != nil {
		file(prefix+".tls.caFile", t.CAFile)
		file(prefix+".tls.certFile", t.CertFile)
		file(prefix+".tls.keyFile", t.KeyFile)
		if (t.CertFile == "") != (t.KeyFile == "") {
			p.add("%s.tls.certFile and %s.tls.keyFile must be set together", prefix, prefix)
		}
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		default:
			p.add("%s.sasl.mechanism %q must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", prefix, s.Mechanism)
		}
		if (s.UsernameFile == "") == (s.Username == "") {
			p.add("%s.sasl: set exactly one of usernameFile and username", prefix)
		}
		if len(s.Username) > maxUsername || strings.ContainsFunc(s.Username, unicode.IsControl) {
			p.add("%s.sasl.username must be at most %d characters without control characters", prefix, maxUsername)
		}
		if s.PasswordFile == "" {
			p.add("%s.sasl.passwordFile is required", prefix)
		}
		file(prefix+".sasl.usernameFile", s.UsernameFile)
		file(prefix+".sasl.passwordFile", s.PasswordFile)
	}
}

// dns1123Re is a lowercase RFC 1123 subdomain, as Kubernetes names most objects (a ConfigMap).
var dns1123Re = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// dns1123Subdomain lists what keeps name from being an object name, as Kubernetes' own
// validation says it (k8s.io/apimachinery's IsDNS1123Subdomain, which this module does not import).
func dns1123Subdomain(name string) []string {
	var errs []string
	if len(name) > 253 {
		errs = append(errs, "must be no more than 253 characters")
	}
	if !dns1123Re.MatchString(name) {
		errs = append(errs, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "+
			"and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "+
			"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
	}
	return errs
}
