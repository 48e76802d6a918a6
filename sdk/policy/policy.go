// Package policy is a retry policy as the dispatcher's config file carries it ([Spec], the
// RetryPolicy resource's spec in the same JSON) and its conversion into the retry core's Policy
// ([FromSpec]), so that the operator (which shows the schedule in status) and the data plane
// (which runs it) compute the same thing. It knows nothing of the CRD's Go types: the operator
// converts them (its internal/policy), and its tests hold the two to the same JSON shape.
package policy

import (
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// DefaultAttemptTimeout applies when spec.attemptTimeout is absent (the API server defaults it too).
const DefaultAttemptTimeout = 30 * time.Second

func dur(d *Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}

func i32(v *int32) int32 {
	if v == nil {
		return 0
	}
	return *v
}

// FromSpec converts a policy Spec to the retry core's Policy, applying the API's defaults for
// anything absent (so objects built in Go without the API server's defaulting convert the same).
func FromSpec(spec Spec) retry.Policy {
	p := retry.Policy{
		MaxAttempts: spec.MaxAttempts,
		Backoff: retry.Backoff{
			InitialDelay: spec.Backoff.InitialDelay.Duration,
			Multiplier:   spec.Backoff.Multiplier,
			MaxDelay:     spec.Backoff.MaxDelay.Duration,
			Jitter:       retry.Jitter{Mode: retry.JitterNone},
			Cap:          retry.CapPlacement(spec.Backoff.Cap),
		},
		Classification: retry.Classification{DefaultAction: retry.ActionDeadLetter},
		AttemptTimeout: DefaultAttemptTimeout,
		Deadline:       dur(spec.Deadline),
		RetryAfter:     retry.RetryAfter{Honor: true, MaxDelay: spec.Backoff.MaxDelay.Duration},
	}
	if p.Backoff.Multiplier == "" {
		p.Backoff.Multiplier = "2"
	}
	if p.Backoff.Cap == "" {
		p.Backoff.Cap = retry.CapAfterJitter
	}
	if j := spec.Backoff.Jitter; j != nil {
		p.Backoff.Jitter = retry.Jitter{Mode: retry.JitterMode(j.Mode), Max: dur(j.Max), MinPercent: i32(j.MinPercent), MaxPercent: i32(j.MaxPercent)}
	}
	if c := spec.Classification; c != nil {
		if c.DefaultAction != "" {
			p.Classification.DefaultAction = retry.Action(c.DefaultAction)
		}
		for _, r := range c.Rules {
			rule := retry.Rule{
				Name:            r.Name,
				Action:          retry.Action(r.Action),
				ErrorTypes:      r.ErrorTypes,
				MessagePatterns: r.MessagePatterns,
				MaxAttempts:     i32(r.MaxAttempts),
			}
			for _, s := range r.HTTPStatuses {
				rule.HTTPStatuses = append(rule.HTTPStatuses, string(s))
			}
			p.Classification.Rules = append(p.Classification.Rules, rule)
		}
	}
	if spec.AttemptTimeout != nil {
		p.AttemptTimeout = spec.AttemptTimeout.Duration
	}
	if ra := spec.RetryAfter; ra != nil {
		p.RetryAfter.Honor = ra.Mode != RetryAfterIgnore
		if ra.MaxDelay != nil {
			p.RetryAfter.MaxDelay = ra.MaxDelay.Duration
		}
	}
	if cb := spec.CircuitBreaker; cb != nil {
		p.CircuitBreaker = &retry.CircuitBreakerConfig{
			FailureRatioPercent: orDefault(cb.FailureRatioPercent, 50),
			MinimumRequests:     orDefault(cb.MinimumRequests, 10),
			Window:              orDefaultDur(cb.Window, 60*time.Second),
			OpenDuration:        orDefaultDur(cb.OpenDuration, 30*time.Second),
			HalfOpenRequests:    orDefault(cb.HalfOpenRequests, 5),
			CloseSuccessPercent: orDefault(cb.CloseSuccessPercent, 80),
		}
	}
	return p
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

func orDefaultDur(d *Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}
