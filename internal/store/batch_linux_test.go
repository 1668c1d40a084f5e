package store

import (
	"testing"
	"time"
)

// Once the machine was seen with much to write back, syncs stay one by
// one for BusyHold, whatever a reading in between says.
func TestQuietHoldsAfterBusy(t *testing.T) {
	defer func(m int64) { maxDirty = m; busySeen.Store(0) }(maxDirty)
	busySeen.Store(0)
	t0 := time.Unix(1_800_000_000, 0)
	maxDirty = 1 << 62
	if !quiet(t0) {
		t.Fatal("never busy, and little to write back: not quiet")
	}
	maxDirty = -1
	if quiet(t0) {
		t.Fatal("more than the bound to write back: quiet")
	}
	maxDirty = 1 << 62
	for _, c := range []struct {
		after time.Duration
		quiet bool
	}{{time.Second, false}, {BusyHold - time.Nanosecond, false}, {BusyHold, true}} {
		if got := quiet(t0.Add(c.after)); got != c.quiet {
			t.Errorf("%v after the machine was busy: quiet %v, want %v", c.after, got, c.quiet)
		}
	}
}
