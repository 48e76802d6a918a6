package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// The environment variables Load reads. A variable set to a non-empty value overrides the file; an
// empty one is ignored, and one of blanks overrides it with nothing (which validation names for a
// required field).
const (
	// EnvConfig names the JSON config file (the mounted ConfigMap key).
	EnvConfig = "RETRYOPS_CONFIG"
	// EnvBootstrapServers sets kafka.bootstrapServers, comma-separated.
	EnvBootstrapServers = "KAFKA_BOOTSTRAP_SERVERS"
	// EnvTopicPrimary sets topics.source.
	EnvTopicPrimary = "KAFKA_TOPIC_PRIMARY"
	// EnvTopicRetry sets topics.retries, comma-separated names: tier i holds the wait before
	// delivery attempt i+1, the last tier also every later one; the delays come from the policy.
	EnvTopicRetry = "KAFKA_TOPIC_RETRY"
	// EnvTopicDLQ sets topics.deadLetter.
	EnvTopicDLQ = "KAFKA_TOPIC_DLQ"
	// EnvConsumerGroup sets consumerGroup.
	EnvConsumerGroup = "KAFKA_CONSUMER_GROUP"
	// EnvMaxAttempts sets policy.maxAttempts: deliveries in all, the first one included.
	EnvMaxAttempts = "RETRY_MAX_ATTEMPTS"
	// EnvBaseDelaySeconds sets policy.backoff.initialDelay, the delay before the FIRST retry, in
	// (possibly fractional) seconds. Seed 004's base 1s is initialDelay 1s; seed 000's formula
	// base*2^n with base 1s starts at 2s, so it is RETRY_BASE_DELAY_SECONDS=2.
	EnvBaseDelaySeconds = "RETRY_BASE_DELAY_SECONDS"
	// EnvMaxDelaySeconds sets policy.backoff.maxDelay, in (possibly fractional) seconds.
	EnvMaxDelaySeconds = "RETRY_MAX_DELAY_SECONDS"
	// EnvSinkURL sets sink.url.
	EnvSinkURL = "SINK_URL"
)

// EnvPodName is the name of the consumer's pod (the downward API's metadata.name), the key of its
// circuit breaker report (circuitReport). When unset the host name is used, which Kubernetes sets to
// the pod's name.
const EnvPodName = "POD_NAME"

// EnvVars lists every environment variable Load reads, for documentation and for the operator.
var EnvVars = []string{
	EnvConfig, EnvBootstrapServers, EnvTopicPrimary, EnvTopicRetry, EnvTopicDLQ, EnvConsumerGroup,
	EnvMaxAttempts, EnvBaseDelaySeconds, EnvMaxDelaySeconds, EnvSinkURL,
}

// Load reads the configuration: the JSON file at path (when path is "", the file named by
// RETRYOPS_CONFIG; when that is unset too, no file), then the environment variables above through
// getenv (a nil getenv uses os.LookupEnv semantics via os.Getenv: only non-empty values count),
// which override the file; then it fills defaults and validates. Unknown JSON fields are an error,
// so that a misspelt field never goes unnoticed.
func Load(path string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if path == "" {
		path = getenv(EnvConfig)
	}
	c := &Config{}
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return nil, err
		}
		if c, err = Parse(data); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	if err := c.ApplyEnv(getenv); err != nil {
		return nil, err
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// readFile reads at most MaxConfigBytes of the regular file at path (symlinks followed, as a
// ConfigMap volume has them). Anything else is refused: a FIFO would block and a device never end.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the config file (%s): %w", EnvConfig, err)
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("reading the config file (%s): %w", EnvConfig, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("reading the config file (%s): %s is not a regular file (%s)", EnvConfig, path, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the config file (%s): %w", EnvConfig, err)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("config file %s is larger than %d bytes", path, MaxConfigBytes)
	}
	return data, nil
}

// Parse decodes a JSON config strictly: an unknown field is an error, so that a misspelt field
// never goes unnoticed, and so is a version this module cannot read (see [Config.Version]; errors.Is
// finds ErrUnsupportedVersion in the error). Every unknown field is named with its path (at most
// ten). data is untrusted: more than MaxConfigBytes is refused. Parse neither fills defaults nor
// validates.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("the config is %d bytes; at most %d", len(data), MaxConfigBytes)
	}
	var version json.RawMessage
	s := &scan{dec: json.NewDecoder(bytes.NewReader(data)), version: &version}
	if err := s.value(reflect.TypeFor[Config](), "", true); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if s.dup != "" {
		return nil, fmt.Errorf("invalid JSON: duplicate field \"%s\": a field may appear once, in any case", s.dup)
	}
	var v string
	if len(version) > 0 && string(version) != "null" {
		if err := json.Unmarshal(version, &v); err != nil {
			return nil, &versionError{fmt.Sprintf("config version %s is not a string: write a major.minor version such as %q", printable(string(version)), Version)}
		}
		if v == "" {
			return nil, &versionError{fmt.Sprintf("config version \"\" is not a major.minor version such as %q", Version)}
		}
	}
	minor, err := checkVersion(v)
	if err != nil {
		return nil, err
	}
	if s.unknown.count() > 0 {
		return nil, unknownFieldsError(v, minor, &s.unknown)
	}
	if s.valueErr != nil {
		return nil, fmt.Errorf("invalid JSON: %w", s.valueErr)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	c := &Config{}
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: more than one JSON value")
	}
	return c, nil
}

// ApplyEnv applies the environment variables that are set to a non-empty value. The policy
// variables create DefaultPolicy first when the file has no policy. KAFKA_TOPIC_RETRY replaces the
// tiers with tiers computed from the (overridden) policy.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	var errs []string
	if v := getenv(EnvBootstrapServers); v != "" {
		c.Kafka.BootstrapServers = splitList(v)
	}
	if v := getenv(EnvTopicPrimary); v != "" {
		c.Topics.Source = strings.TrimSpace(v)
	}
	if v := getenv(EnvTopicDLQ); v != "" {
		c.Topics.DeadLetter = strings.TrimSpace(v)
	}
	if v := getenv(EnvConsumerGroup); v != "" {
		c.ConsumerGroup = strings.TrimSpace(v)
	}
	if v := getenv(EnvSinkURL); v != "" {
		c.Sink = &Sink{URL: strings.TrimSpace(v)}
	}
	pol := func() *policy.Spec {
		if c.Policy == nil {
			c.Policy = DefaultPolicy()
		}
		return c.Policy
	}
	if v := getenv(EnvMaxAttempts); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Sprintf("%s=%q must be a whole number of at least 1", EnvMaxAttempts, v))
		} else {
			pol().MaxAttempts = int32(n)
		}
	}
	if v := getenv(EnvBaseDelaySeconds); v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q %v", EnvBaseDelaySeconds, v, err))
		} else {
			pol().Backoff.InitialDelay = policy.Duration{Duration: d}
		}
	}
	if v := getenv(EnvMaxDelaySeconds); v != "" {
		d, err := parseSeconds(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q %v", EnvMaxDelaySeconds, v, err))
		} else {
			pol().Backoff.MaxDelay = policy.Duration{Duration: d}
		}
	}
	if v := getenv(EnvTopicRetry); v != "" {
		names := splitList(v)
		if len(names) == 0 {
			errs = append(errs, fmt.Sprintf("%s=%q names no topic", EnvTopicRetry, v))
		} else if plan, err := c.plan(); err != nil {
			errs = append(errs, fmt.Sprintf("%s is set but the policy is invalid: %v", EnvTopicRetry, err))
		} else {
			c.Topics.Retries = TiersFromNames(names, plan)
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Problems: errs}
	}
	return nil
}

func (c *Config) plan() (retry.Plan, error) {
	p := c.Policy
	if p == nil {
		p = DefaultPolicy()
	}
	comp, err := retry.Compile(policy.FromSpec(*p))
	if err != nil {
		return retry.Plan{}, err
	}
	return comp.Plan(), nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseSeconds(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("must be a number of seconds such as 1 or 0.5")
	}
	if f < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	if f > float64(math.MaxInt64)/1e9 {
		return 0, fmt.Errorf("is too large")
	}
	return time.Duration(math.Round(f * 1e9)), nil
}

// DefaultPolicy is the policy used when the config has none: seed 004's generic worker (3
// deliveries in all, 1s then 2s, proportional jitter 50..150% after a 10s cap) with the design's
// standard classification (408, 429 and 5xx retried; 400, 401, 403, 404 and 422 dead-lettered;
// TimeoutError and ConnectionError retried; anything else dead-lettered).
func DefaultPolicy() *policy.Spec {
	minP, maxP := int32(50), int32(150)
	return &policy.Spec{
		MaxAttempts: 3,
		Backoff: policy.Backoff{
			InitialDelay: policy.Duration{Duration: time.Second},
			Multiplier:   "2",
			MaxDelay:     policy.Duration{Duration: 10 * time.Second},
			Jitter:       &policy.Jitter{Mode: policy.JitterProportional, MinPercent: &minP, MaxPercent: &maxP},
			Cap:          policy.CapBeforeJitter,
		},
		Classification: &policy.Classification{
			DefaultAction: policy.DefaultAction(retry.ActionDeadLetter),
			Rules: []policy.ClassificationRule{
				{Name: "transient-http", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"408", "429", "500-599"}},
				{Name: "permanent-http", Action: policy.ActionDeadLetter, HTTPStatuses: []policy.HTTPStatusMatch{"400", "401", "403", "404", "422"}},
				{Name: "transient-errors", Action: policy.ActionRetry, ErrorTypes: []string{retry.ErrorTypeTimeout, retry.ErrorTypeConnection}},
			},
		},
	}
}

// Default fills every absent field with its default. It is idempotent.
func (c *Config) Default() {
	if c.ConsumerGroup == "" && c.Pipeline.Namespace != "" && c.Pipeline.Name != "" {
		c.ConsumerGroup = c.Pipeline.Namespace + "." + c.Pipeline.Name
	}
	if c.Kafka.ClientID == "" {
		c.Kafka.ClientID = DefaultClientID
	}
	if c.DeadLetterKafka != nil && c.DeadLetterKafka.ClientID == "" {
		c.DeadLetterKafka.ClientID = DefaultClientID
	}
	if c.Policy == nil {
		c.Policy = DefaultPolicy()
	}
	if c.Delivery.Ordering == "" {
		c.Delivery.Ordering = OrderingOrdered
	}
	if c.Delivery.MaxInFlight == 0 {
		c.Delivery.MaxInFlight = DefaultMaxInFlight
	}
	if b := c.Delivery.Batch; b != nil {
		if b.MaxRecords == 0 {
			b.MaxRecords = DefaultBatchMaxRecords
		}
		if b.MaxBytes == 0 {
			b.MaxBytes = DefaultBatchMaxBytes
		}
		if b.MaxWait == nil {
			b.MaxWait = &policy.Duration{Duration: DefaultBatchMaxWait}
		}
	}
	if c.Delivery.MaxBufferedRecords == 0 {
		c.Delivery.MaxBufferedRecords = max(1000, 4*c.Delivery.MaxInFlight)
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.DrainTimeout == nil {
		c.DrainTimeout = &policy.Duration{Duration: DefaultDrainTimeout}
	}
	if c.Listen.MetricsAddress == "" {
		c.Listen.MetricsAddress = DefaultMetricsAddress
	}
	if c.Listen.HealthAddress == "" {
		c.Listen.HealthAddress = DefaultHealthAddress
	}
	if len(c.Topics.Retries) == 0 && c.Topics.Source != "" {
		if plan, err := c.plan(); err == nil && len(plan.Schedule) > 0 {
			c.Topics.Retries = BuildTiers(c.Topics.Source, NamingByAttempt, plan)
		}
	}
}

// Compile compiles the policy with the retry core (after Default).
func (c *Config) Compile() (*retry.Compiled, error) {
	p := c.Policy
	if p == nil {
		p = DefaultPolicy()
	}
	return retry.Compile(policy.FromSpec(*p))
}
