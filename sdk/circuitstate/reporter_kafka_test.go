package circuitstate

import (
	"testing"
	"time"
)

// TestReporterReportsKafkaProblems: a Kafka problem is written with the breaker Closed, repeated
// with its latest message while it lasts (a new message alone is not written at once), written
// at once when its reason changes, kept beside an open breaker, and removed once both are gone.
func TestReporterReportsKafkaProblems(t *testing.T) {
	e := newEnv(t, nil)
	r := e.reporter(time.Hour) // the repeats are stepped below
	start(t, r)
	eventually(t, "the start removal", func() bool { return len(e.patches(t)) >= 1 })

	since := t0.Add(-time.Minute)
	r.ObserveKafka(&KafkaProblem{Reason: KafkaAuthentication, Message: "refused\n", Since: since})
	eventually(t, "the Kafka entry", func() bool {
		_, ok := entryOf(t, e.data(t))
		return ok
	})
	got, _ := entryOf(t, e.data(t))
	if got.State != Closed || got.Kafka == nil || *got.Kafka != (KafkaProblem{Reason: KafkaAuthentication, Message: "refused", Since: since}) || !got.ReportedAt.Equal(t0) {
		t.Fatalf("entry %+v (kafka %+v), want Closed with the bounded problem reported at t0", got, got.Kafka)
	}

	// The same reason with another message: carried by the next repeat.
	n := len(e.patches(t))
	r.ObserveKafka(&KafkaProblem{Reason: KafkaAuthentication, Message: "refused again", Since: since})
	if m := len(e.patches(t)); m != n {
		t.Fatalf("%d patches after a new message, want %d", m, n)
	}
	e.armed(t)
	t1 := e.step(time.Hour)
	eventually(t, "the repeat with the new message", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.ReportedAt.Equal(t1) && got.Kafka != nil && got.Kafka.Message == "refused again"
	})

	// A new reason is written at once; an open breaker keeps the problem beside it.
	r.ObserveKafka(&KafkaProblem{Reason: KafkaAuthorization, Message: "group", Since: t1})
	eventually(t, "the new reason", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.Kafka != nil && got.Kafka.Reason == KafkaAuthorization
	})
	r.Observe(Open)
	eventually(t, "the open breaker beside the problem", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.State == Open && got.Kafka != nil
	})
	r.ObserveKafka(nil)
	eventually(t, "the problem gone, the breaker left", func() bool {
		got, ok := entryOf(t, e.data(t))
		return ok && got.State == Open && got.Kafka == nil
	})
	r.Observe(Closed)
	eventually(t, "the entry removed", func() bool {
		_, ok := entryOf(t, e.data(t))
		return !ok
	})
}
