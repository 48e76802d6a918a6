package circuitstate

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)

func enc(state State, since, reportedAt time.Time) string {
	return Entry{State: state, Since: since, ReportedAt: reportedAt}.Encode()
}

func checkSummary(t *testing.T, got Summary, want Summary) {
	t.Helper()
	if got.State != want.State {
		t.Errorf("State = %q, want %q", got.State, want.State)
	}
	if len(got.Pods) != len(want.Pods) || (len(want.Pods) > 0 && !reflect.DeepEqual(got.Pods, want.Pods)) {
		t.Errorf("Pods = %q, want %q", got.Pods, want.Pods)
	}
	if !got.Since.Equal(want.Since) {
		t.Errorf("Since = %v, want %v", got.Since, want.Since)
	}
	if !got.Expires.Equal(want.Expires) {
		t.Errorf("Expires = %v, want %v", got.Expires, want.Expires)
	}
	if len(got.Stale) != len(want.Stale) || (len(want.Stale) > 0 && !reflect.DeepEqual(got.Stale, want.Stale)) {
		t.Errorf("Stale = %q, want %q", got.Stale, want.Stale)
	}
}

func TestFoldEmpty(t *testing.T) {
	for name, data := range map[string]map[string]string{"nil": nil, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			got := Fold(data, t0, 30*time.Second)
			checkSummary(t, got, Summary{State: Closed})
			if !got.Since.IsZero() || !got.Expires.IsZero() {
				t.Errorf("Since %v / Expires %v, want zero", got.Since, got.Expires)
			}
		})
	}
}

func TestFoldOpenBeatsHalfOpen(t *testing.T) {
	const ttl = 30 * time.Second
	now := t0
	data := map[string]string{
		// Sorted before the Open pods: must be dropped when Open shows up.
		"a-half": enc(HalfOpen, now.Add(-500*time.Second), now.Add(-2*time.Second)),
		// The Open pods: the earliest Since is in the middle of the sort order.
		"b-open": enc(Open, now.Add(-50*time.Second), now.Add(-20*time.Second)),
		"c-open": enc(Open, now.Add(-100*time.Second), now.Add(-5*time.Second)),
		"d-open": enc(Open, now.Add(-70*time.Second), now.Add(-1*time.Second)),
		// Sorted after: must not join the Open pods. It expires first.
		"e-half": enc(HalfOpen, now.Add(-900*time.Second), now.Add(-ttl+time.Nanosecond)),
		// Stale Open with an even earlier Since: must not count.
		"f-stale": enc(Open, now.Add(-1000*time.Second), now.Add(-ttl)),
	}
	checkSummary(t, Fold(data, now, ttl), Summary{
		State:   Open,
		Pods:    []string{"b-open", "c-open", "d-open"},
		Since:   now.Add(-100 * time.Second),
		Expires: now.Add(time.Nanosecond),
		Stale:   []string{"f-stale"},
	})
}

func TestFoldHalfOpenBeatsClosed(t *testing.T) {
	const ttl = time.Minute
	now := t0
	data := map[string]string{
		"p1":     enc(HalfOpen, now.Add(-10*time.Second), now.Add(-40*time.Second)),
		"p0":     enc(HalfOpen, now.Add(-30*time.Second), now.Add(-10*time.Second)),
		"p2":     enc(HalfOpen, now.Add(-20*time.Second), now.Add(-1*time.Second)),
		"old":    enc(Open, now.Add(-2*time.Hour), now.Add(-time.Hour)),
		"closed": `{"state":"Closed","since":"2030-01-02T03:00:00Z","reportedAt":"2030-01-02T03:04:00Z"}`,
	}
	checkSummary(t, Fold(data, now, ttl), Summary{
		State:   HalfOpen,
		Pods:    []string{"p0", "p1", "p2"},
		Since:   now.Add(-30 * time.Second),
		Expires: now.Add(-40*time.Second + ttl),
		Stale:   []string{"closed", "old"},
	})
}

func TestFoldStaleOnly(t *testing.T) {
	const ttl = 30 * time.Second
	now := t0
	reported := now.Add(-time.Second).Format(time.RFC3339Nano)
	data := map[string]string{
		"exact":        enc(Open, now.Add(-time.Minute), now.Add(-ttl)),
		"old":          enc(HalfOpen, now.Add(-time.Minute), now.Add(-ttl-time.Hour)),
		"garbage":      "not json",
		"empty":        "",
		"closed":       `{"state":"Closed","since":"` + reported + `","reportedAt":"` + reported + `"}`,
		"bogus-state":  `{"state":"Broken","since":"` + reported + `","reportedAt":"` + reported + `"}`,
		"no-state":     `{"since":"` + reported + `","reportedAt":"` + reported + `"}`,
		"no-reported":  `{"state":"Open","since":"` + reported + `"}`,
		"bad-reported": `{"state":"Open","since":"` + reported + `","reportedAt":"yesterday"}`,
	}
	checkSummary(t, Fold(data, now, ttl), Summary{
		State: Closed,
		Stale: []string{"bad-reported", "bogus-state", "closed", "empty", "exact", "garbage", "no-reported", "no-state", "old"},
	})
}

func TestFoldTTLBoundary(t *testing.T) {
	const ttl = 30 * time.Second
	now := t0
	since := now.Add(-time.Hour)

	got := Fold(map[string]string{"p": enc(Open, since, now.Add(-ttl))}, now, ttl)
	checkSummary(t, got, Summary{State: Closed, Stale: []string{"p"}})

	got = Fold(map[string]string{"p": enc(Open, since, now.Add(-ttl+time.Nanosecond))}, now, ttl)
	checkSummary(t, got, Summary{State: Open, Pods: []string{"p"}, Since: since, Expires: now.Add(time.Nanosecond)})

	// Reported in the future (clock skew) is fresh.
	got = Fold(map[string]string{"p": enc(HalfOpen, since, now.Add(time.Second))}, now, ttl)
	checkSummary(t, got, Summary{State: HalfOpen, Pods: []string{"p"}, Since: since, Expires: now.Add(time.Second + ttl)})
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, e := range []Entry{
		{State: Open, Since: t0.Add(-time.Minute), ReportedAt: t0},
		{State: HalfOpen, Since: t0, ReportedAt: t0.Add(time.Nanosecond)},
		{State: Open, ReportedAt: t0.In(time.FixedZone("X", 3600))},
	} {
		v := e.Encode()
		got, err := Decode(v)
		if err != nil {
			t.Fatalf("Decode(%s): %v", v, err)
		}
		if got.State != e.State || !got.Since.Equal(e.Since) || !got.ReportedAt.Equal(e.ReportedAt) {
			t.Errorf("Decode(Encode(%+v)) = %+v", e, got)
		}
		if again := got.Encode(); again != v {
			t.Errorf("re-encoded %s, first %s", again, v)
		}
	}
	// The wire format: the field names the operator and consumers share.
	var m map[string]any
	if err := json.Unmarshal([]byte(Entry{State: Open, Since: t0, ReportedAt: t0.Add(time.Second)}.Encode()), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"state": "Open", "since": "2030-01-02T03:04:05.123456789Z", "reportedAt": "2030-01-02T03:04:06.123456789Z"}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("Encode = %v, want %v", m, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, v := range []string{
		"",
		"not json",
		`{"state":"Closed","reportedAt":"2030-01-02T03:04:05Z"}`,
		`{"state":"","reportedAt":"2030-01-02T03:04:05Z"}`,
		`{"state":"open","reportedAt":"2030-01-02T03:04:05Z"}`,
		`{"state":"Open","since":"2030-01-02T03:04:05Z"}`,
		`{"state":"HalfOpen"}`,
	} {
		if e, err := Decode(v); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", v, e)
		} else if e != (Entry{}) {
			t.Errorf("Decode(%q) returned %+v with the error, want the zero Entry", v, e)
		}
	}
}

func TestMergePatch(t *testing.T) {
	e := Entry{State: HalfOpen, Since: t0, ReportedAt: t0.Add(time.Second)}
	var got map[string]any
	if err := json.Unmarshal(MergePatch("pod-a", &e), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"data": map[string]any{"pod-a": e.Encode()}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MergePatch(pod-a, &e) = %v, want %v", got, want)
	}

	got = nil
	raw := MergePatch("pod-a", nil)
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want = map[string]any{"data": map[string]any{"pod-a": nil}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MergePatch(pod-a, nil) = %s, want %v", raw, want)
	}
}

func TestSummaryMessage(t *testing.T) {
	since := time.Date(2030, 1, 2, 4, 4, 5, 999, time.FixedZone("CET", 3600)) // 03:04:05Z
	for _, tc := range []struct {
		s        Summary
		replicas int32
		want     string
	}{
		{Summary{State: Closed}, 3, "no consumer reports an open circuit breaker"},
		{Summary{State: Open, Pods: []string{"a", "b"}, Since: since}, 3,
			"circuit breaker open: consumption is paused until the sink recovers (2 of 3 pods since 2030-01-02T03:04:05Z: a, b)"},
		{Summary{State: HalfOpen, Pods: []string{"a"}, Since: since}, 2,
			"circuit breaker half-open: probe deliveries are testing the sink (1 of 2 pods since 2030-01-02T03:04:05Z: a)"},
		{Summary{State: Open, Pods: []string{"a", "b", "c"}, Since: since}, 3,
			"circuit breaker open: consumption is paused until the sink recovers (3 of 3 pods since 2030-01-02T03:04:05Z: a, b, c)"},
		{Summary{State: Open, Pods: []string{"a", "b", "c", "d", "e"}, Since: since}, 6,
			"circuit breaker open: consumption is paused until the sink recovers (5 of 6 pods since 2030-01-02T03:04:05Z: a, b, c and 2 more)"},
	} {
		if got := tc.s.Message(tc.replicas); got != tc.want {
			t.Errorf("Message(%d) of %+v:\n got %q\nwant %q", tc.replicas, tc.s, got, tc.want)
		}
	}
}
