package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

const fileJSON = `{
  "pipeline": {"namespace": "shop", "name": "orders"},
  "kafka": {"bootstrapServers": ["file-kafka:9092"], "sasl": {"mechanism": "SCRAM-SHA-512", "usernameFile": "USER", "passwordFile": "PASS"}},
  "deadLetterKafka": {"bootstrapServers": ["dlq-kafka:9092"]},
  "topics": {
    "source": "orders",
    "retries": [
      {"name": "orders.retry.1", "delay": "2s", "earliest": "2s", "latest": "3s", "attempts": [2]},
      {"name": "orders.retry.2", "delay": "4s", "earliest": "4s", "latest": "5s", "attempts": [3]}
    ],
    "deadLetter": "orders.dlq"
  },
  "policy": {"maxAttempts": 3, "backoff": {"initialDelay": "2s", "multiplier": "2", "maxDelay": "300s",
             "jitter": {"mode": "Additive", "max": "1s"}}},
  "sink": {"url": "http://orchestrator.shop.svc:8080/tasks"},
  "delivery": {"ordering": "Unordered", "maxInFlight": 50},
  "maxRecordBytes": 65536,
  "commitInterval": "100ms",
  "listen": {"metricsAddress": ":9191", "healthAddress": "-"}
}`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func loadFile(t *testing.T, env map[string]string) (*config.Config, error) {
	t.Helper()
	dir := t.TempDir()
	user, pass := writeFile(t, dir, "username", "svc\n"), writeFile(t, dir, "password", "s3cret")
	js := strings.ReplaceAll(strings.ReplaceAll(fileJSON, `"USER"`, `"`+user+`"`), `"PASS"`, `"`+pass+`"`)
	if env == nil {
		env = map[string]string{}
	}
	env[config.EnvConfig] = writeFile(t, dir, "config.json", js)
	return config.Load("", envOf(env))
}

func TestLoadFile(t *testing.T) {
	c, err := loadFile(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ConsumerGroup != "shop.orders" {
		t.Errorf("consumer group defaults to <namespace>.<name>: %q", c.ConsumerGroup)
	}
	if c.PipelineID() != "shop/orders" || c.PipelineLabel() != "orders" {
		t.Errorf("pipeline id %q label %q", c.PipelineID(), c.PipelineLabel())
	}
	if c.Delivery.Ordering != config.OrderingUnordered || c.Delivery.MaxInFlight != 50 || c.Delivery.MaxBufferedRecords != 1000 ||
		c.Delivery.UncommittedLimit() != 1000 {
		t.Errorf("delivery %+v", c.Delivery)
	}
	if c.MaxRecordBytes != 65536 || config.Dur(c.CommitInterval, 0) != 100*time.Millisecond || config.Dur(c.DrainTimeout, 0) != config.DefaultDrainTimeout {
		t.Errorf("limits: %d %v %v", c.MaxRecordBytes, c.CommitInterval, c.DrainTimeout)
	}
	if c.Listen.MetricsAddress != ":9191" || c.Listen.HealthAddress != config.Disabled {
		t.Errorf("listen %+v", c.Listen)
	}
	if c.DeadLetterConnection().BootstrapServers[0] != "dlq-kafka:9092" || c.Kafka.ClientID != config.DefaultClientID {
		t.Errorf("connections %+v %+v", c.Kafka, c.DeadLetterKafka)
	}
}

// TestEnvOverridesFile: every seed-style variable that is set wins over the file.
func TestEnvOverridesFile(t *testing.T) {
	c, err := loadFile(t, map[string]string{
		config.EnvBootstrapServers: " a:9092, b:9092 ,",
		config.EnvTopicPrimary:     "tasks",
		config.EnvTopicRetry:       "tasks_retry",
		config.EnvTopicDLQ:         "tasks_dlq",
		config.EnvConsumerGroup:    "workers",
		config.EnvMaxAttempts:      "6",
		config.EnvBaseDelaySeconds: "0.5",
		config.EnvMaxDelaySeconds:  "30",
		config.EnvSinkURL:          "https://sink.example/x",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Kafka.BootstrapServers, ","); got != "a:9092,b:9092" {
		t.Errorf("bootstrap %q", got)
	}
	if c.Topics.Source != "tasks" || c.Topics.DeadLetter != "tasks_dlq" || c.ConsumerGroup != "workers" || c.Sink.URL != "https://sink.example/x" {
		t.Errorf("topics %+v group %q sink %+v", c.Topics, c.ConsumerGroup, c.Sink)
	}
	if c.Policy.MaxAttempts != 6 || c.Policy.Backoff.InitialDelay.Duration != 500*time.Millisecond || c.Policy.Backoff.MaxDelay.Duration != 30*time.Second {
		t.Errorf("policy %+v", c.Policy.Backoff)
	}
	// The file's jitter and multiplier survive: env overrides fields, not the whole policy.
	if c.Policy.Backoff.Jitter == nil || c.Policy.Backoff.Jitter.Mode != policy.JitterAdditive {
		t.Errorf("jitter lost: %+v", c.Policy.Backoff.Jitter)
	}
	// One retry topic for five retries (seed 000's single retry queue): it holds them all.
	if len(c.Topics.Retries) != 1 || len(c.Topics.Retries[0].Attempts) != 5 {
		t.Fatalf("tiers %+v", c.Topics.Retries)
	}
	for a := int32(2); a <= 6; a++ {
		if i, ok := c.Topics.Retries.For(a); !ok || i != 0 {
			t.Errorf("attempt %d -> tier %d %v", a, i, ok)
		}
	}
	w := c.Topics.Retries[0]
	if w.Delay.Duration != 500*time.Millisecond || w.Earliest.Duration != 500*time.Millisecond || w.Latest.Duration != 9*time.Second {
		t.Errorf("tier window %v [%v, %v]", w.Delay, w.Earliest, w.Latest)
	}
}

// TestEnvOnly: the seeds' variables alone configure a pipeline (library mode without a file).
func TestEnvOnly(t *testing.T) {
	c, err := config.Load("", envOf(map[string]string{
		config.EnvBootstrapServers: "kafka:9092",
		config.EnvTopicPrimary:     "alice_tasks",
		config.EnvTopicDLQ:         "alice_dlq",
		config.EnvConsumerGroup:    "alice-orchestrator",
		config.EnvMaxAttempts:      "6",
		config.EnvBaseDelaySeconds: "2",
		config.EnvMaxDelaySeconds:  "300",
	}))
	if err != nil {
		t.Fatal(err)
	}
	comp, err := c.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if comp.MaxAttempts() != 6 {
		t.Errorf("max attempts %d", comp.MaxAttempts())
	}
	// Tiers default to <source>.retry.<n>, one per retry.
	if got := strings.Join(c.Topics.Retries.Names(), ","); got != "alice_tasks.retry.1,alice_tasks.retry.2,alice_tasks.retry.3,alice_tasks.retry.4,alice_tasks.retry.5" {
		t.Errorf("tiers %s", got)
	}
	if c.Sink != nil || c.Listen.MetricsAddress != ":9090" || c.Listen.HealthAddress != ":8081" {
		t.Errorf("defaults: sink %v listen %+v", c.Sink, c.Listen)
	}
}

func TestValidationErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		json string
		env  map[string]string
		want []string
	}{
		{name: "empty", json: `{}`, want: []string{
			"consumerGroup (KAFKA_CONSUMER_GROUP) is required",
			"kafka.bootstrapServers (KAFKA_BOOTSTRAP_SERVERS) is required",
			"topics.source (KAFKA_TOPIC_PRIMARY) is required",
			"topics.deadLetter (KAFKA_TOPIC_DLQ) is required",
		}},
		{name: "unknown field", json: `{"consumerGroupp": "x"}`, want: []string{`unknown field "consumerGroupp"`}},
		{name: "bad values", json: `{"consumerGroup": "g", "kafka": {"bootstrapServers": ["nohost"], "tls": {"certFile": "/nope/tls.crt"},
			"sasl": {"mechanism": "GSSAPI"}},
			"topics": {"source": "a b", "deadLetter": "a.dlq", "retries": [{"name": "a.dlq", "attempts": [1]}]},
			"sink": {"url": "ftp://x"}, "delivery": {"ordering": "Sideways", "maxInFlight": 20000, "maxUncommittedRecords": -1},
			"policy": {"maxAttempts": 0, "backoff": {"initialDelay": "1s", "multiplier": "0.5", "maxDelay": "1s"}},
			"listen": {"metricsAddress": "9090"}, "drainTimeout": "-1s"}`, want: []string{
			`kafka.bootstrapServers[0] "nohost" must be host:port`,
			`kafka.tls.certFile "/nope/tls.crt" cannot be read (is the Secret mounted?)`,
			"kafka.tls.certFile and kafka.tls.keyFile must be set together",
			`kafka.sasl.mechanism "GSSAPI" must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`,
			"kafka.sasl: set exactly one of usernameFile and username",
			`topics.source "a b" is not a Kafka topic name`,
			"topics.retries[0].attempts[0] 1 must be at least 2",
			`topics.deadLetter "a.dlq" is also topics.retries[0].name: dead letters would be consumed again`,
			"policy: invalid retry policy: maxAttempts 0 must be between 1 and 100; backoff.multiplier \"0.5\" must be at least 1",
			`sink.url (SINK_URL) "ftp://x" must be an absolute http:// or https:// URL`,
			`delivery.ordering "Sideways" must be Ordered or Unordered`,
			"delivery.maxInFlight 20000 must be between 1 and 10000",
			"delivery.maxUncommittedRecords -1 must not be negative",
			"drainTimeout -1s must not be negative",
			`listen.metricsAddress "9090" must be host:port`,
		}},
		{name: "retries need a tier", json: `{"consumerGroup": "g", "kafka": {"bootstrapServers": ["k:1"]},
			"topics": {"source": "a", "deadLetter": "d", "retries": [{"name": "a.r", "attempts": [3]}]}}`,
			want: []string{"topics.retries: no tier holds attempt 2 (the first retry)"}},
		{name: "pattern above the budget", json: `{"consumerGroup": "g", "kafka": {"bootstrapServers": ["k:1"]},
			"topics": {"source": "a", "deadLetter": "d"}, "sink": {"url": "http://s"},
			"policy": {"maxAttempts": 1, "backoff": {"initialDelay": "1s", "multiplier": "2", "maxDelay": "1s"},
				"classification": {"rules": [{"name": "transient", "action": "Retry", "messagePatterns": ["(?:` + strings.Repeat(".", 241) + `){1000}"]}]}}}`,
			want: []string{`policy: invalid retry policy: classification.rules[0].messagePatterns[0] "(?:......`,
				`(rule "transient") compiles to about 241002 instructions, above the budget of 2000 per pattern`}},
		{name: "bad env", json: `{}`, env: map[string]string{config.EnvMaxAttempts: "many", config.EnvBaseDelaySeconds: "-1", config.EnvMaxDelaySeconds: "soon"},
			want: []string{`RETRY_MAX_ATTEMPTS="many" must be a whole number`, `RETRY_BASE_DELAY_SECONDS="-1" must not be negative`,
				`RETRY_MAX_DELAY_SECONDS="soon" must be a number of seconds`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{config.EnvConfig: writeFile(t, dir, tc.name+".json", tc.json)}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := config.Load("", envOf(env))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var ve *config.ValidationError
			if tc.name != "unknown field" && !errors.As(err, &ve) {
				t.Errorf("not a *ValidationError: %T", err)
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	_, err := config.Load("/does/not/exist.json", envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "RETRYOPS_CONFIG") {
		t.Errorf("error %v", err)
	}
}

func TestTiers(t *testing.T) {
	// seed 000 with a 10s cap: retries 4 and 5 have identical windows and share a ByDelay tier.
	spec := policy.Spec{MaxAttempts: 6, Backoff: policy.Backoff{InitialDelay: metav1D(2 * time.Second), Multiplier: "2", MaxDelay: metav1D(10 * time.Second)}}
	comp, err := retry.Compile(policy.FromSpec(spec))
	if err != nil {
		t.Fatal(err)
	}
	byAttempt := config.BuildTiers("chat", config.NamingByAttempt, comp.Plan())
	if got := strings.Join(byAttempt.Names(), " "); got != "chat.retry.1 chat.retry.2 chat.retry.3 chat.retry.4 chat.retry.5" {
		t.Errorf("ByAttempt: %s", got)
	}
	byDelay := config.BuildTiers("chat", config.NamingByDelay, comp.Plan())
	if got := strings.Join(byDelay.Names(), " "); got != "chat.retry.2s chat.retry.4s chat.retry.8s chat.retry.10s" {
		t.Errorf("ByDelay: %s", got)
	}
	for attempt, want := range map[int32]int{2: 0, 3: 1, 4: 2, 5: 3, 6: 3} {
		if i, ok := byDelay.For(attempt); !ok || i != want {
			t.Errorf("For(%d) = %d %v, want %d", attempt, i, ok, want)
		}
	}
	if _, ok := byDelay.For(1); ok {
		t.Error("attempt 1 has no tier")
	}
	for d, want := range map[time.Duration]string{90 * time.Second: "1m30s", time.Hour: "1h", 10 * time.Minute: "10m", 1500 * time.Millisecond: "1.5s", 500 * time.Microsecond: "500us"} {
		if got := config.FormatDelay(d); got != want {
			t.Errorf("FormatDelay(%v) = %s, want %s", d, got, want)
		}
	}
}

func metav1D(d time.Duration) policy.Duration { return policy.Duration{Duration: d} }
