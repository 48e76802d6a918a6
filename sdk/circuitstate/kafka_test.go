package circuitstate

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func kafkaEntry(state State, reason KafkaReason, message string, since, reportedAt time.Time) string {
	return Entry{State: state, Kafka: &KafkaProblem{Reason: reason, Message: message, Since: since}, ReportedAt: reportedAt}.Encode()
}

func TestKafkaEntryWireFormat(t *testing.T) {
	var m map[string]any
	v := kafkaEntry(Closed, KafkaAuthentication, "refused", t0, t0.Add(time.Second))
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"state": "Closed", "since": "0001-01-01T00:00:00Z", "reportedAt": "2030-01-02T03:04:06.123456789Z",
		"kafka": map[string]any{"reason": "Authentication", "message": "refused", "since": "2030-01-02T03:04:05.123456789Z"}}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Encode = %v, want %v", m, want)
	}
	got, err := Decode(v)
	if err != nil || got.Kafka == nil || got.Kafka.Reason != KafkaAuthentication || !got.Kafka.Since.Equal(t0) {
		t.Errorf("Decode(%s) = %+v, %v", v, got, err)
	}
	// An entry of a consumer older than the Kafka report: a circuit only.
	old, err := Decode(`{"state":"Open","since":"2030-01-02T03:04:05Z","reportedAt":"2030-01-02T03:04:06Z"}`)
	if err != nil || old.State != Open || old.Kafka != nil {
		t.Errorf("an old entry: %+v, %v", old, err)
	}
}

func TestDecodeRejectsHostileKafkaEntries(t *testing.T) {
	r := `"reportedAt":"2030-01-02T03:04:05Z"`
	for name, v := range map[string]string{
		"no state and no kafka":  `{"state":"Closed",` + r + `}`,
		"an unknown reason":      `{"state":"Closed","kafka":{"reason":"Sideways","message":"x"},` + r + `}`,
		"a reason of wrong case": `{"state":"Closed","kafka":{"reason":"authentication","message":"x"},` + r + `}`,
		"kafka not an object":    `{"state":"Closed","kafka":"Authentication",` + r + `}`,
		"no reportedAt":          `{"state":"Closed","kafka":{"reason":"TLS","message":"x"}}`,
		"huge":                   `{"state":"Closed","kafka":{"reason":"TLS","message":"` + strings.Repeat("x", maxEntryBytes) + `"},` + r + `}`,
		"bad json":               `{"state":"Closed","kafka":{"reason":"TLS"`,
	} {
		if e, err := Decode(v); err == nil {
			t.Errorf("%s: Decode = %+v, want an error", name, e)
		}
	}
}

func TestBoundMessage(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "SASL_AUTHENTICATION_FAILED: invalid credentials", "SASL_AUTHENTICATION_FAILED: invalid credentials"},
		{"control characters", "a\x1b[31mred\x07\x00b\u0085c", "a[31mredb c"}, // U+0085 is a line break
		{"line breaks and tabs fold to one space", "first\r\n\tsecond   third\n", "first second third"},
		{"bidi controls", "user\u202eevil\u2066x\u200f", "userevilx"},
		{"invalid UTF-8", "ok\xff\xfeok", "okok"},
		{"long, cut on a character", long, strings.Repeat("é", (MaxKafkaMessage-3)/2) + "..."},
	} {
		got := BoundMessage(tc.in)
		if got != tc.want {
			t.Errorf("%s: BoundMessage(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
		if len(got) > MaxKafkaMessage || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", tc.name, len(got), utf8.ValidString(got))
		}
	}
	// What a pod wrote is bounded again when decoded.
	e, err := Decode(kafkaEntry(Closed, KafkaTLS, "x\x1b"+strings.Repeat("y", 1000), t0, t0))
	if err != nil || len(e.Kafka.Message) > MaxKafkaMessage || strings.ContainsRune(e.Kafka.Message, 0x1b) {
		t.Errorf("decoded a hostile message: %q, %v", e.Kafka.Message, err)
	}
}

func TestFoldKafka(t *testing.T) {
	const ttl = 30 * time.Second
	now := t0
	fresh := now.Add(-time.Second)
	data := map[string]string{
		"a-authz": kafkaEntry(Closed, KafkaAuthorization, "group refused", now.Add(-time.Hour), fresh),
		"b-tls":   kafkaEntry(Closed, KafkaTLS, "unknown authority", now.Add(-30*time.Minute), fresh),
		"c-auth":  kafkaEntry(Closed, KafkaAuthentication, "later", now.Add(-time.Minute), fresh),
		"d-auth": Entry{State: Open, Since: now.Add(-time.Minute), ReportedAt: fresh,
			Kafka: &KafkaProblem{Reason: KafkaAuthentication, Message: "first", Since: now.Add(-2 * time.Minute)}}.Encode(),
		"e-stale":    kafkaEntry(Closed, KafkaAuthentication, "gone", now.Add(-time.Hour), now.Add(-ttl)),
		"f-circuit":  enc(HalfOpen, now.Add(-time.Minute), fresh),
		"g-no-since": `{"state":"Closed","kafka":{"reason":"Authentication","message":"no since"},"reportedAt":"` + now.Add(-10*time.Second).Format(time.RFC3339Nano) + `"}`,
	}
	s := Fold(data, now, ttl)
	// The circuit is folded as before: the Closed entries do not count as pods of a state.
	checkSummary(t, s, Summary{State: Open, Pods: []string{"d-auth"}, Since: now.Add(-time.Minute), Expires: now.Add(-10*time.Second + ttl), Stale: []string{"e-stale"}})
	// g-no-since's problem started when it was reported; d-auth's is the earliest.
	want := &KafkaSummary{Reason: KafkaAuthentication, Pods: []string{"c-auth", "d-auth", "g-no-since"}, Since: now.Add(-2 * time.Minute), Message: "first"}
	if !reflect.DeepEqual(s.Kafka, want) {
		t.Errorf("Kafka = %+v, want %+v", s.Kafka, want)
	}
	if got := Fold(map[string]string{"p": enc(Open, now, fresh)}, now, ttl).Kafka; got != nil {
		t.Errorf("Kafka = %+v without a Kafka report, want nil", got)
	}
}

func TestKafkaSummaryText(t *testing.T) {
	since := time.Date(2026, 11, 26, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	k := &KafkaSummary{Reason: KafkaAuthentication, Pods: []string{"p-abc"}, Since: since, Message: "SASL authentication failed: invalid credentials"}
	if got, want := k.Text(2), "consumers cannot authenticate to Kafka (1 of 2 pods since 2026-11-26T08:00:00Z: p-abc): SASL authentication failed: invalid credentials"; got != want {
		t.Errorf("Text =\n %q\nwant\n %q", got, want)
	}
	k = &KafkaSummary{Reason: KafkaAuthorization, Pods: []string{"a", "b", "c", "d"}, Since: since, Message: "m"}
	if got, want := k.Text(4), "consumers are not authorized by Kafka (4 of 4 pods since 2026-11-26T08:00:00Z: a, b, c and 1 more): m"; got != want {
		t.Errorf("Text =\n %q\nwant\n %q", got, want)
	}
}
