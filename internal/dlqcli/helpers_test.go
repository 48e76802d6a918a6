package dlqcli

import (
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"90s", testNow.Add(-90 * time.Second), false},
		{"2h", testNow.Add(-2 * time.Hour), false},
		{"30d", testNow.AddDate(0, 0, -30), false},
		{"1.5d", testNow.Add(-36 * time.Hour), false},
		{"2w", testNow.AddDate(0, 0, -14), false},
		{"2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-11-01T10:30:00+01:00", time.Date(2026, 11, 1, 9, 30, 0, 0, time.UTC), false},
		{"-2h", time.Time{}, true},
		{"-1d", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"5x", time.Time{}, true},
	} {
		got, err := parseTime("since", tc.in, testNow)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestBars(t *testing.T) {
	for _, tc := range []struct {
		n, total int64
		want     string
	}{
		{0, 0, "[          ]   0%  0/0"},
		{0, 10, "[          ]   0%  0/10"},
		{1, 16, "[▋         ]   6%  1/16"},
		{5, 10, "[█████     ]  50%  5/10"},
		{10, 10, "[██████████] 100%  10/10"},
		{12, 10, "[██████████] 100%  12/10"},
	} {
		if got := renderBar(tc.n, tc.total, 10); got != tc.want {
			t.Errorf("renderBar(%d, %d) = %q, want %q", tc.n, tc.total, got, tc.want)
		}
	}
	if got := chart(0, 10, 20); got != "" {
		t.Errorf("chart of 0 = %q, want nothing", got)
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 45 * time.Second: "45s", 119 * time.Second: "119s", 5 * time.Minute: "5m",
		3 * time.Hour: "3h", 47 * time.Hour: "47h", 72 * time.Hour: "3d", 3 * 365 * 24 * time.Hour: "3y",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%s) = %q, want %q", d, got, want)
		}
	}
}
