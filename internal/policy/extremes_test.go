package policy_test

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/policy"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// withDurations is a spec with every duration field set to d.
func withDurations(d time.Duration) retryv1alpha1.RetryPolicySpec {
	md := &metav1.Duration{Duration: d}
	return retryv1alpha1.RetryPolicySpec{
		MaxAttempts:    3,
		AttemptTimeout: md,
		Deadline:       md,
		Backoff: retryv1alpha1.Backoff{InitialDelay: *md, Multiplier: "1.000001", MaxDelay: *md,
			Jitter: &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterAdditive, Max: md}},
		RetryAfter:     &retryv1alpha1.RetryAfter{Mode: retryv1alpha1.RetryAfterHonor, MaxDelay: md},
		CircuitBreaker: &retryv1alpha1.CircuitBreaker{Window: md, OpenDuration: md},
	}
}

// TestNoSpecMakesPolicySpecPanicOrDiffer: the controllers call policy.Spec at every reconcile, so a
// panic would wedge the manager; and the data plane reads the policy from the rendered file, so what
// crosses must come back the same from the file. Durations at the ends of time.Duration, fractional
// ones, empty lists and zero pointers, odd but valid strings.
func TestNoSpecMakesPolicySpecPanicOrDiffer(t *testing.T) {
	specs := map[string]retryv1alpha1.RetryPolicySpec{}
	for name, d := range map[string]time.Duration{
		"the largest duration": math.MaxInt64, "the smallest duration": math.MinInt64, "zero": 0,
		"a nanosecond": 1, "-1ns": -1, "1.5h": 90 * time.Minute, "1.5ms": 1500 * time.Microsecond,
		"fractional": 1234567891 * time.Nanosecond,
	} {
		specs[name] = withDurations(d)
	}
	zero := int32(0)
	empty := withDurations(time.Second)
	empty.Classification = &retryv1alpha1.Classification{Rules: []retryv1alpha1.ClassificationRule{
		{Name: "r", Action: retryv1alpha1.ActionRetry, HTTPStatuses: []retryv1alpha1.HTTPStatusMatch{}, ErrorTypes: []string{}, MessagePatterns: []string{}, MaxAttempts: &zero}}}
	empty.Backoff.Jitter = &retryv1alpha1.Jitter{Mode: retryv1alpha1.JitterProportional, MinPercent: &zero, MaxPercent: &zero}
	specs["empty lists and zero pointers"] = empty
	odd := withDurations(time.Second)
	odd.Classification = &retryv1alpha1.Classification{DefaultAction: retryv1alpha1.DefaultAction("Retry"), Rules: []retryv1alpha1.ClassificationRule{
		{Name: "r", Action: retryv1alpha1.ActionDeadLetter, MessagePatterns: []string{"<script>&\u2028\u0000", `(?i)\d+\\`, "é\U0001F600"}}}}
	specs["odd strings"] = odd
	specs["the zero spec"] = retryv1alpha1.RetryPolicySpec{}

	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			var got sdkpolicy.Spec
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("policy.Spec panicked: %v", p)
					}
				}()
				got = policy.Spec(spec)
			}()
			// What the render writes into the config file and the data plane reads back.
			data, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var read sdkpolicy.Spec
			if err := json.Unmarshal(data, &read); err != nil {
				t.Fatalf("the data plane cannot read the policy the operator writes: %v\n%s", err, data)
			}
			if !reflect.DeepEqual(read, got) {
				t.Errorf("the data plane reads\n%+v\nnot\n%+v", read, got)
			}
			if !reflect.DeepEqual(sdkpolicy.FromSpec(read), policy.FromSpec(spec)) {
				t.Errorf("the data plane's policy\n%+v\nis not the operator's\n%+v", sdkpolicy.FromSpec(read), policy.FromSpec(spec))
			}
			if b := spec.Backoff; spec.Deadline != nil && (got.Backoff.InitialDelay.Duration != b.InitialDelay.Duration || got.Backoff.MaxDelay.Duration != b.MaxDelay.Duration ||
				got.Deadline.Duration != spec.Deadline.Duration || got.CircuitBreaker.Window.Duration != spec.CircuitBreaker.Window.Duration) {
				t.Errorf("a duration changed: %+v", got)
			}
		})
	}
}
