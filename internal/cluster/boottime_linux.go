//go:build linux

package cluster

import (
	"time"

	"golang.org/x/sys/unix"
)

// sinceBoot is CLOCK_BOOTTIME: it goes on while the machine is
// suspended, as a lease does by the database's clock (Go's monotonic
// clock here does not).
func sinceBoot() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("CLOCK_BOOTTIME: " + err.Error())
	}
	return time.Duration(ts.Nano())
}
