// Package retry is the pure retry core of retry-operator: the policy math shared by the controller
// (which shows a policy's computed schedule in status) and the dispatcher (which delays, retries and
// dead-letters records). It imports the standard library and k8s.io/utils/clock only: no Kubernetes
// API, no Kafka.
//
// A [Policy] is validated and compiled once with [Compile]. The [Compiled] policy then answers, without
// allocating on the hot path:
//
//   - the delay window before each retry ([Compiled.Window]) and a sampled delay from it
//     ([Compiled.Sample]), computed exactly (the multiplier is a decimal parsed with math/big, so
//     there is no floating-point drift in the nominal delays);
//   - the whole plan ([Compiled.Plan]): one [Step] per retry, the total delay, the best and worst case,
//     and the retry tiers ([Plan.Tiers]);
//   - what to do with a failed delivery ([Compiled.Classify], [Compiled.Decide], [Compiled.Expired]).
//
// A [Breaker] is a circuit breaker (closed, open, half-open) over a sliding time window.
//
// Counting convention: attempts count deliveries, the first one included. Retry n (n >= 1) is the
// delay before delivery attempt n+1, so a policy with MaxAttempts 6 has retries 1..5.
//
// Time and randomness are injected (a k8s.io/utils/clock.PassiveClock for the [Breaker], [Rand] for
// jitter) so that tests are deterministic. The policy math is also fuzzed (`make fuzz`).
package retry
