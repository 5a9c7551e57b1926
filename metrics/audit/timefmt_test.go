package audit

import (
	"testing"
	"time"
)

func TestAppendTimeMatchesFormat(t *testing.T) {
	cases := []time.Time{
		time.Date(2026, 12, 2, 5, 15, 44, 123456789, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 1e6, time.UTC),
		time.Date(1900, 2, 28, 23, 59, 59, 999e6, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 2, 29, 1, 2, 3, 4, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 6, 1, 2, 0, 0, 5e5, time.FixedZone("x", 5*3600+1800)),
		time.Date(2026, 1, 1, 0, 30, 0, 0, time.FixedZone("y", -9*3600)),
		time.Now(),
		{},
	}
	for _, c := range cases {
		if got, want := string(appendTime(nil, c)), c.UTC().Format(tsLayout); got != want {
			t.Errorf("appendTime(%v) = %q, want %q", c, got, want)
		}
	}
	// Every day of a 400-year cycle and the years around the fast path's edges.
	for _, start := range []time.Time{time.Date(1800, 1, 1, 23, 59, 59, 999e6, time.UTC), time.Date(-2, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9997, 1, 1, 0, 0, 0, 0, time.UTC)} {
		days := 146097
		if start.Year() != 1800 {
			days = 365 * 5
		}
		for d := 0; d < days; d++ {
			c := start.AddDate(0, 0, d)
			if got, want := string(appendTime(nil, c)), c.UTC().Format(tsLayout); got != want {
				t.Fatalf("appendTime(%v) = %q, want %q", c, got, want)
			}
		}
	}
}

func FuzzAppendTime(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0))
	f.Add(int64(1764652544), int64(123456789), int64(3600))
	f.Add(int64(minFastUnix), int64(999999999), int64(-1))
	f.Add(int64(maxFastUnix-1), int64(999999999), int64(0))
	f.Add(int64(-1), int64(1), int64(0))
	f.Fuzz(func(t *testing.T, sec, nsec, offset int64) {
		c := time.Unix(sec, nsec).In(time.FixedZone("z", int(offset%(26*3600))))
		if got, want := string(appendTime(nil, c)), c.UTC().Format(tsLayout); got != want {
			t.Fatalf("appendTime(%v) = %q, want %q", c, got, want)
		}
	})
}
