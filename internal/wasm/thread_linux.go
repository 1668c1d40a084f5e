//go:build linux

package wasm

import (
	"time"

	"golang.org/x/sys/unix"
)

func gettid() int { return unix.Gettid() }

// threadCPU reads the calling thread's CPU clock.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
