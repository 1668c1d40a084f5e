//go:build !linux

package volumetest

import "testing"

// XFS skips: volumes need Linux.
func XFS(tb testing.TB, size int64) string {
	tb.Skip("volumes need Linux")
	return ""
}

// Free skips: volumes need Linux.
func Free(tb testing.TB, dir string) int64 {
	tb.Skip("volumes need Linux")
	return 0
}

// Private skips: volumes need Linux.
func Private(tb testing.TB, dir string) { tb.Skip("volumes need Linux") }

// WhileBusy calls f once: volumes need Linux.
func WhileBusy(f func() error) error { return f() }
