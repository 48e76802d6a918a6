package config_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

func hash10(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

func TestTierBase(t *testing.T) {
	long := strings.Repeat("n", 253)
	for _, c := range []struct {
		name, policy, namespace, pipeline, want string
	}{
		{"without a claim policy the base is <namespace>.<name>", "", "team-a", "billing", "team-a.billing"},
		{"under {namespace}. the base is the resolved prefix and the name", "{namespace}.", "team-a", "billing", "team-a.billing"},
		{"a constant prefix is followed by <namespace>.<name>", "shared.", "team-a", "billing", "shared.team-a.billing"},
		{"a prefix with {namespace} in the middle is resolved and followed by the name", "kafka.{namespace}_", "team-a", "billing", "kafka.team-a_billing"},
		{"a base of exactly the limit is kept whole", "", "ns", strings.Repeat("x", config.MaxTierBase-3), "ns." + strings.Repeat("x", config.MaxTierBase-3)},
		{"a base one over the limit keeps the prefix, cuts the rest and appends 10 hex digits of its hash", "{namespace}.", "team-a", strings.Repeat("x", config.MaxTierBase-6),
			"team-a." + strings.Repeat("x", config.MaxTierBase-7-11) + "-" + hash10("team-a."+strings.Repeat("x", config.MaxTierBase-6))},
		{"a 253-character name without a policy is hashed", "", "ns", long,
			"ns." + strings.Repeat("n", config.MaxTierBase-3-11) + "-" + hash10("ns."+long)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := config.TierBase(c.policy, c.namespace, c.pipeline)
			if got != c.want {
				t.Errorf("TierBase(%q, %q, %q) =\n %s\nwant\n %s", c.policy, c.namespace, c.pipeline, got, c.want)
			}
			if len(got) > config.MaxTierBase {
				t.Errorf("base of %d characters, over %d", len(got), config.MaxTierBase)
			}
		})
	}
	// A claim prefix longer than the base's limit is cut too (the claim policy then refuses the tiers).
	if got := config.TierBase(strings.Repeat("p", 300), "ns", "billing"); got != strings.Repeat("p", config.MaxTierBase) {
		t.Errorf("a 300-character prefix gives the base %s (%d characters)", got, len(got))
	}
	// Two long names differing only past the cut stay apart.
	a, b := config.TierBase("", "ns", long+"a"), config.TierBase("", "ns", long+"b")
	if a == b {
		t.Errorf("two long names share the base %s", a)
	}
}

// The longest tier names a base of MaxTierBase gets, ByAttempt (100 attempts) and ByDelay (the
// longest delay, with a tier suffix), fit in Kafka's limit; two pipelines on one source never share
// a tier.
func TestTierNamesOfPipelines(t *testing.T) {
	spec := policy.Spec{MaxAttempts: 100, Backoff: policy.Backoff{InitialDelay: metav1D(2 * time.Second), Multiplier: "2", MaxDelay: metav1D(7*time.Hour + 3*time.Minute + 1500*time.Millisecond)}}
	comp, err := retry.Compile(policy.FromSpec(spec))
	if err != nil {
		t.Fatal(err)
	}
	base := config.TierBase("{namespace}.", "team-a", strings.Repeat("p", 300))
	for _, naming := range []config.RetryTopicNaming{config.NamingByAttempt, config.NamingByDelay} {
		for _, n := range config.BuildTiers(base, naming, comp.Plan()).Names() {
			if len(n) > config.MaxTopicName || !strings.HasPrefix(n, "team-a.") {
				t.Errorf("%s: tier %s (%d characters)", naming, n, len(n))
			}
		}
	}
	if n := base + ".retry." + config.FormatDelay(time.Duration(1<<63-1)) + "-99"; len(n) > config.MaxTopicName {
		t.Errorf("the longest ByDelay suffix makes %d characters", len(n))
	}

	short := policy.Spec{MaxAttempts: 3, Backoff: policy.Backoff{InitialDelay: metav1D(2 * time.Second), Multiplier: "2", MaxDelay: metav1D(10 * time.Second)}}
	comp, err = retry.Compile(policy.FromSpec(short))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, pipeline := range []string{"billing", "shipping", "analytics"} {
		for _, naming := range []config.RetryTopicNaming{config.NamingByAttempt, config.NamingByDelay} {
			for _, n := range config.BuildTiers(config.TierBase("{namespace}.", "shop", pipeline), naming, comp.Plan()).Names() {
				if other, ok := seen[n]; ok && other != pipeline {
					t.Errorf("tier %s of %s and %s", n, pipeline, other)
				}
				seen[n] = pipeline
			}
		}
	}
	if got := strings.Join(config.BuildTiers(config.TierBase("{namespace}.", "shop", "billing"), config.NamingByAttempt, comp.Plan()).Names(), " "); got != "shop.billing.retry.1 shop.billing.retry.2" {
		t.Errorf("ByAttempt: %s", got)
	}
	if got := strings.Join(config.BuildTiers(config.TierBase("", "shop", "billing"), config.NamingByDelay, comp.Plan()).Names(), " "); got != "shop.billing.retry.2s shop.billing.retry.4s" {
		t.Errorf("ByDelay: %s", got)
	}
}
