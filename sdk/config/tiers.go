package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Bounds of Topics.Draining: how many tiers of earlier policies a dispatcher drains, and how far
// ahead a record of such a tier may be due: as far as any policy can schedule a retry, as in every
// tier, so that no record an earlier policy scheduled is refused.
const (
	MaxDrainingTiers = 32
	MaxDrainingDelay = retry.MaxScheduleDelay
)

// Tier names: Kafka's limit on a topic name, and how much of it the suffix .retry.<n> or
// .retry.<delay>[-<n>] may take (the longest time.Duration formats in 24 characters, a tier index
// in at most 3 with its dash), so that a base of at most MaxTierBase characters names tiers that fit.
const (
	MaxTopicName      = 249
	tierSuffixReserve = 40
	MaxTierBase       = MaxTopicName - tierSuffixReserve
	// tierHashDigits is how many hex digits of the SHA-256 of a too long base end its shortened form.
	tierHashDigits = 10
)

// namespacePlaceholder stands for the namespace in a topic claim policy (--topic-prefix).
const namespacePlaceholder = "{namespace}"

// TierBase is the base of a pipeline's retry tier names, so that tiers belong to one pipeline and
// never to its source (two pipelines on one source never share a tier). topicPrefix is the
// manager's topic claim policy (--topic-prefix, "{namespace}" standing for the namespace), P below
// resolved for namespace:
//   - no policy: <namespace>.<name>;
//   - a policy with {namespace} ("{namespace}." gives team-a.): <P><name>;
//   - a constant policy ("shared."): <P><namespace>.<name>.
//
// So the tiers are claimable by the namespace whose pipeline they serve. A base longer than
// MaxTierBase keeps P and cuts the rest to what fits with "-" and the first 10 hex digits of the
// SHA-256 of the whole base, so that distinct long bases stay distinct and every tier name fits in
// Kafka's 249 characters.
func TierBase(topicPrefix, namespace, name string) string {
	prefix, rest := "", namespace+"."+name
	switch {
	case topicPrefix == "":
	case strings.Contains(topicPrefix, namespacePlaceholder):
		prefix, rest = strings.ReplaceAll(topicPrefix, namespacePlaceholder, namespace), name
	default:
		prefix = topicPrefix
	}
	base := prefix + rest
	if len(base) <= MaxTierBase {
		return base
	}
	sum := sha256.Sum256([]byte(base))
	hash := "-" + hex.EncodeToString(sum[:])[:tierHashDigits]
	keep := max(0, MaxTierBase-len(prefix)-len(hash))
	short := prefix + rest[:min(keep, len(rest))] + hash
	// A prefix so long that nothing of the rest fits is cut too: the claim policy then refuses the
	// tiers, as it would any name that cannot start with it.
	return short[:min(len(short), MaxTierBase)]
}

// Tiers are the retry tiers of a pipeline, in order.
type Tiers []RetryTier

// For returns the index (0-based) of the tier that holds a record waiting for delivery attempt
// attempt (2 for the first retry): the tier listing attempt in its attempts, or else the last tier
// whose attempts are all below it (so a policy with more retries than tiers reuses the last tier, as
// seed 000's single retry queue does). ok is false for attempt < 2 or when no tier fits.
func (ts Tiers) For(attempt int32) (index int, ok bool) {
	if attempt < 2 || len(ts) == 0 {
		return 0, false
	}
	best := -1
	for i := range ts {
		for _, a := range ts[i].Attempts {
			if a == attempt {
				return i, true
			}
			if a < attempt {
				best = i
			}
		}
	}
	if best < 0 {
		return 0, false
	}
	return best, true
}

// Names returns the tiers' topic names in order.
func (ts Tiers) Names() []string {
	out := make([]string, len(ts))
	for i := range ts {
		out[i] = ts[i].Name
	}
	return out
}

// BuildTiers names and describes the tiers of a plan the way the operator creates them, under base
// (TierBase of the pipeline; a standalone dispatcher uses its source): ByAttempt makes one tier per
// retry named <base>.retry.<n>; ByDelay shares one tier between consecutive retries with identical
// windows (retry.Plan.Tiers(true)) and names it <base>.retry.<delay> (FormatDelay of the nominal
// delay, such as "team-a.billing.retry.5m"), adding "-<n>" when two shared tiers would get the same
// name.
func BuildTiers(base string, naming RetryTopicNaming, plan retry.Plan) Tiers {
	byDelay := naming == NamingByDelay
	core := plan.Tiers(byDelay)
	out := make(Tiers, 0, len(core))
	seen := map[string]bool{}
	for _, t := range core {
		name := base + ".retry." + strconv.Itoa(int(t.Index))
		if byDelay {
			name = base + ".retry." + FormatDelay(t.Nominal)
			if seen[name] {
				name += "-" + strconv.Itoa(int(t.Index))
			}
		}
		seen[name] = true
		out = append(out, RetryTier{
			Name:     name,
			Delay:    policy.Duration{Duration: t.Nominal},
			Earliest: policy.Duration{Duration: t.Earliest},
			Latest:   policy.Duration{Duration: t.Latest},
			Attempts: append([]int32(nil), t.Attempts...),
		})
	}
	return out
}

// TiersFromNames assigns the retries of a plan to named tiers, as KAFKA_TOPIC_RETRY does: tier i
// (0-based) holds the wait before delivery attempt i+2, and the last tier also every later attempt;
// a tier's window spans the windows of its attempts. Names beyond the plan's retries get no
// attempts.
func TiersFromNames(names []string, plan retry.Plan) Tiers {
	out := make(Tiers, len(names))
	for i, n := range names {
		out[i].Name = n
	}
	for i, s := range plan.Schedule {
		t := &out[min(i, len(out)-1)]
		if len(t.Attempts) == 0 {
			t.Delay.Duration, t.Earliest.Duration, t.Latest.Duration = s.Nominal, s.Earliest, s.Latest
		} else {
			t.Earliest.Duration = min(t.Earliest.Duration, s.Earliest)
			t.Latest.Duration = max(t.Latest.Duration, s.Latest)
		}
		t.Attempts = append(t.Attempts, s.Attempt)
	}
	return out
}

// FormatDelay formats a delay for a topic name: Go duration syntax without zero units and with "u"
// for micro ("2s", "1m30s", "1h", "500ms", "1.5s").
func FormatDelay(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return strings.ReplaceAll(s, "µ", "u")
}
