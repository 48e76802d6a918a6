// Package policy turns the RetryPolicy API into the data plane's policy (sdk/policy), whose
// conversion into the retry core's Policy the operator (which shows the schedule in status) and the
// dispatcher (which runs it) share, and compiles each policy generation once (Cache).
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// DefaultAttemptTimeout applies when spec.attemptTimeout is absent (the API server defaults it too).
const DefaultAttemptTimeout = sdkpolicy.DefaultAttemptTimeout

// Spec is the RetryPolicy spec as the data plane reads it from the config file: the same JSON,
// decoded strictly, so that the two can never drift apart unseen (TestTheDataPlaneReadsEveryPolicyField
// holds every field of the one to the other). It panics only if they have: a programming error.
func Spec(spec retryv1alpha1.RetryPolicySpec) sdkpolicy.Spec {
	data, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("policy: encoding a RetryPolicy spec: %v", err))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var out sdkpolicy.Spec
	if err := dec.Decode(&out); err != nil {
		panic(fmt.Sprintf("policy: the data plane's policy type no longer reads the RetryPolicy spec: %v", err))
	}
	return out
}

// FromSpec converts a RetryPolicy spec to the retry core's Policy, applying the API's defaults for
// anything absent (so objects built in Go without the API server's defaulting convert the same).
func FromSpec(spec retryv1alpha1.RetryPolicySpec) retry.Policy { return sdkpolicy.FromSpec(Spec(spec)) }
