package main

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		p    int
		want time.Duration
	}{{0, 1}, {10, 2}, {50, 6}, {90, 10}, {100, 10}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile %d = %d, want %d", tc.p, got, tc.want)
		}
	}
	if ds[0] != 5 {
		t.Error("percentile sorted its argument")
	}
	if m := mean(ds); m != 5 {
		t.Errorf("mean = %d, want 5", m)
	}
}
