package dlqcli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseTime reads a time flag: an RFC 3339 time (2026-11-23T10:00:00Z), a date (2026-11-23, UTC
// midnight), or a duration back from now (90s, 15m, 2h, 30d, 2w).
func parseTime(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	d, err := parseAge(s)
	if err != nil {
		return time.Time{}, usagef("--%s %q: want a duration back from now (30m, 2h, 30d, 2w) or a time (2026-11-23T10:00:00Z)", flag, s)
	}
	return now.Add(-d).Truncate(time.Second), nil
}

// parseAge reads a duration with the units of time.ParseDuration plus d (days) and w (weeks).
func parseAge(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("bad duration %q", s)
			}
			return time.Duration(v * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return d, nil
}

// age formats a duration like kubectl's AGE column: 45s, 12m, 3h, 5d, 2y.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 2*365*24*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	default:
		return fmt.Sprintf("%dy", int(d.Hours()/24/365))
	}
}
