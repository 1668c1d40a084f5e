package main

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/volume"
)

// TestServeSizeFlags: --workspace-max and --output-max read sizes;
// a workspace bound of 0 is none, one under the least is refused, and an
// output bound is above zero.
func TestServeSizeFlags(t *testing.T) {
	for _, c := range []struct {
		flag, v string
		least   int64
		want    int64
		ok      bool
	}{
		{"--workspace-max", "10GiB", volume.MinSize, 10 << 30, true},
		{"--workspace-max", "0", volume.MinSize, -1, true},
		{"--workspace-max", "1MiB", volume.MinSize, 0, false},
		{"--workspace-max", "lots", volume.MinSize, 0, false},
		{"--output-max", "64MiB", 0, 64 << 20, true},
		{"--output-max", "0", 0, 0, false},
	} {
		got, err := sizeFlag(c.flag, c.v, c.least)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%s %s: %d %v", c.flag, c.v, got, err)
		}
	}
}
