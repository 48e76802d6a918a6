package circuitstate

import (
	"testing"
	"time"
)

// A pod's ServiceAccount may write any entry into its pipeline's ConfigMap, and a node's clock may
// run ahead. An entry reported more than the TTL after now would stay fresh long after its pod
// stopped repeating it (forever, for year 9999), keeping a fake or long-gone problem on the
// pipeline's conditions: it is stale and deleted. One a little ahead (clock skew within the TTL)
// counts and expires within two TTLs. A Kafka problem cannot have started after it was reported.
func TestFoldEntriesFromTheFuture(t *testing.T) {
	const ttl = 30 * time.Second
	now := t0
	data := map[string]string{
		"far":    kafkaEntry(Closed, KafkaAuthentication, "forged", now, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
		"ahead":  enc(Open, now.Add(-time.Minute), now.Add(ttl+time.Second)),
		"skewed": kafkaEntry(Closed, KafkaAuthorization, "refused", now.Add(time.Hour), now.Add(10*time.Second)),
	}
	s := Fold(data, now, ttl)
	checkSummary(t, s, Summary{State: Closed, Expires: now.Add(10*time.Second + ttl), Stale: []string{"ahead", "far"}})
	if s.Kafka == nil || s.Kafka.Reason != KafkaAuthorization || len(s.Kafka.Pods) != 1 || s.Kafka.Pods[0] != "skewed" {
		t.Fatalf("Kafka = %+v, want skewed's authorization problem only", s.Kafka)
	}
	if want := now.Add(10 * time.Second); !s.Kafka.Since.Equal(want) {
		t.Errorf("Kafka.Since = %v, want %v (its report's time, not the hour ahead it claims)", s.Kafka.Since, want)
	}
}
