package chartschema

import (
	"flag"
	"math/rand/v2"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// managerAccepts is, for each constrained value, whether the manager's own validation of its flag
// accepts a value (the value as the chart passes it).
var managerAccepts = map[string]func(string) bool{
	"kafka.consumerSecret":    func(v string) bool { return kafkaspec.CheckConsumerSecret(v) == nil },
	"claimPolicy.topicPrefix": func(v string) bool { return kafkaspec.CheckTopicPrefix(v) == nil },
	"claimPolicy.groupPrefix": func(v string) bool { return kafkaspec.CheckGroupPrefix(v) == nil },
	"claimPolicy.allowedBootstrapServers": func(v string) bool {
		return !strings.ContainsAny(v, ", \\t") && kafkaspec.CheckAllowedServers([]string{v}) == nil
	},
	"alerts.ruleLabels.key": func(v string) bool {
		return !strings.ContainsAny(v, ",= ") && len(validation.IsQualifiedName(v)) == 0
	},
	"alerts.ruleLabels.value": func(v string) bool {
		return !strings.ContainsAny(v, ", ") && len(validation.IsValidLabelValue(v)) == 0
	},
	"alerts.runbookBaseURL": func(v string) bool { return render.ValidRunbookBaseURL(v) == nil },
	"logLevel": func(v string) bool {
		fs := flag.NewFlagSet("zap", flag.ContinueOnError)
		(&zap.Options{}).BindFlags(fs)
		return fs.Set("zap-log-level", v) == nil
	},
}

// skipsEmpty are the values the chart does not pass to the manager when empty.
var skipsEmpty = map[string]bool{"kafka.consumerSecret": true, "claimPolicy.topicPrefix": true, "alerts.runbookBaseURL": true, "logLevel": true}

// constraints are the String constraints by name (an object's keys and values apart).
func constraints(t *testing.T) map[string]*String {
	out := map[string]*String{}
	for _, v := range Values() {
		if v.Keys != nil {
			out[v.Path+".key"], out[v.Path+".value"] = v.Keys, v.Values
			continue
		}
		out[v.Path] = v.String
	}
	for name := range out {
		if managerAccepts[name] == nil {
			t.Fatalf("no manager check for %s", name)
		}
	}
	return out
}

// tokens are what the generated values are made of: the characters and words that matter to some
// check, and a few that none allows.
var tokens = []string{Placeholder, Placeholder, "{", "}", "namespace", "a", "z", "Z", "0", "9", "1", ".", ".", "-", "-", "_",
	" ", "/", ":", ":9092", ":0", ":65536", "*", "*.", "[", "]", "[::1]", "é", "\x01", "\x7f", "\n", "#", "%", "%2F", "%zz",
	"http://", "https://", "?", "debug", "DEBUG", "info", "error", "panic", "12", "128", "+", "=", ",", "\\"}

// generate returns a value of tokens, now and then one long enough for the length bounds.
func generate(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(10) {
		b.WriteString(tokens[r.IntN(len(tokens))])
	}
	if r.IntN(8) == 0 {
		b.WriteString(strings.Repeat(tokens[r.IntN(len(tokens))], 20+r.IntN(250)))
		b.WriteString(tokens[r.IntN(len(tokens))])
	}
	return b.String()
}

// Whatever a constraint accepts, the manager accepts: generated values, for each constraint.
func TestWhatTheChartAcceptsTheManagerAccepts(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 12))
	for name, c := range constraints(t) {
		accepted := 0
		for range 30000 {
			v := generate(r)
			if v == "" && skipsEmpty[name] {
				continue
			}
			if c.Accepts(v) {
				accepted++
				if !managerAccepts[name](v) {
					t.Errorf("%s: the chart accepts %q, the manager refuses it", name, v)
				}
			}
		}
		if accepted == 0 {
			t.Errorf("%s: no generated value accepted: the test shows nothing", name)
		}
	}
}

// The values users write are accepted by both, and those the manager refuses at start are refused.
func TestTheChartAcceptsWhatUsersWrite(t *testing.T) {
	c := constraints(t)
	for name, vals := range map[string][]string{
		"kafka.consumerSecret":                {"{namespace}-kafka-user", "kafka-consumer", "{namespace}.consumer", strings.Repeat("a", 190) + Placeholder},
		"claimPolicy.topicPrefix":             {"{namespace}.", "{namespace}_", "team-a.", "shared", "{namespace}.{namespace}"},
		"claimPolicy.groupPrefix":             {"", "{namespace}.", "{namespace}:", "billing-"},
		"claimPolicy.allowedBootstrapServers": {"*.kafka.svc:9092", "kafka-0.kafka:9093", "10.0.0.1:9092", "[::1]:9092", "kafka:65535"},
		"alerts.ruleLabels.key":               {"release", "app.kubernetes.io/part-of", "team_a"},
		"alerts.ruleLabels.value":             {"", "prometheus", "kube-prometheus-stack", "a.b_c"},
		"alerts.runbookBaseURL":               {"https://wiki.example.com/runbooks", "http://docs.internal:8080/ops/runbooks.md", "https://x.example/a%20b?x=1"},
		"logLevel":                            {"debug", "info", "error", "panic", "1", "5", "127"},
	} {
		for _, v := range vals {
			if !managerAccepts[name](v) || !c[name].Accepts(v) {
				t.Errorf("%s %q: the manager accepts it: %v, the chart: %v", name, v, managerAccepts[name](v), c[name].Accepts(v))
			}
		}
	}
	for name, vals := range map[string][]string{
		"kafka.consumerSecret":                {"{namespace}_consumer", "Consumer", strings.Repeat("a", 191) + Placeholder, strings.Repeat(Placeholder, 5)},
		"claimPolicy.topicPrefix":             {"{namespace}-", "{namespace}", "a{namespace}b", "team a.", "{ns}."},
		"claimPolicy.groupPrefix":             {"{namespace}-", "{namespace}", "a\x01."},
		"claimPolicy.allowedBootstrapServers": {"kafka", "kafka:", "kafka:0", "kafka:65536", "*kafka:9092", "*.:9092", "a.*.b:9092", ":9092"},
		"alerts.ruleLabels.key":               {"", "a b", "-a", "a/b/c", "/a", strings.Repeat("a", 64)},
		"alerts.ruleLabels.value":             {"a b", "-a", "a-", strings.Repeat("a", 64)},
		"alerts.runbookBaseURL":               {"wiki/runbooks", "ftp://x", "https://x/#a", "https://a b/"},
		"logLevel":                            {"verbose", "0", "-1", "trace"},
	} {
		for _, v := range vals {
			if managerAccepts[name](v) || c[name].Accepts(v) {
				t.Errorf("%s %q: the manager accepts it: %v, the chart: %v; want both to refuse it", name, v, managerAccepts[name](v), c[name].Accepts(v))
			}
		}
	}
}

// The placeholder is the one kafkaspec replaces.
func TestPlaceholderIsKafkaspecs(t *testing.T) {
	if Placeholder != kafkaspec.NamespacePlaceholder {
		t.Errorf("Placeholder %q, kafkaspec's %q", Placeholder, kafkaspec.NamespacePlaceholder)
	}
}
