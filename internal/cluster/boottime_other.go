//go:build !linux

package cluster

import "time"

var started = time.Now()

// sinceBoot is the process's monotonic clock where there is no
// CLOCK_BOOTTIME: a machine suspended mid-collection is not seen.
func sinceBoot() time.Duration { return time.Since(started) }
