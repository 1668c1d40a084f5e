package store

import (
	"bytes"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// MaxDirtyForSyncfs is how much data waiting to be written back, on the
// whole machine (/proc/meminfo's Dirty and Writeback), a sync may find
// and still be one syncfs. A syncfs writes back every dirty page of its
// filesystem, another tenant's workspace among them: beyond this the
// files are synced one by one, so that a neighbour writing gigabytes
// does not make every commit wait for them.
const MaxDirtyForSyncfs = 64 << 20

// BusyHold is how long after the machine was last seen with more than
// MaxDirtyForSyncfs to write back syncs stay one by one: a neighbour
// writing steadily leaves the count low for moments (a file it
// truncates drops its dirty pages), and a syncfs begun in such a
// moment waits for all it writes next.
const BusyHold = 10 * time.Second

var (
	// maxDirty is MaxDirtyForSyncfs (tests set it).
	maxDirty int64 = MaxDirtyForSyncfs
	// busySeen is when (Unix nanoseconds) more than maxDirty was last
	// seen waiting.
	busySeen atomic.Int64
)

// quiet says whether little waits to be written back, and has for
// BusyHold.
func quiet(now time.Time) bool {
	if dirty() > maxDirty {
		busySeen.Store(now.UnixNano())
		return false
	}
	last := busySeen.Load()
	return last == 0 || now.Sub(time.Unix(0, last)) >= BusyHold
}

// sync makes the named files in the syncer's directory (and its
// entries) durable, and says how many sync calls it made: one syncfs of
// their filesystem (which writes back every dirty page of it, these
// among them, and waits) while little else is waiting to be written
// (quiet), else an fsync of each and of the directory. The
// directory was opened before the files were written, so a write-back
// error of any of them since is reported to the syncfs even when
// another sync met it first.
func (s *Syncer) sync(names []string) (int, error) {
	if quiet(time.Now()) {
		return 1, unix.Syncfs(int(s.d.Fd()))
	}
	return s.each(names)
}

// dirty is the bytes the machine has waiting to be written back (Dirty
// and Writeback of /proc/meminfo); unreadable, it is taken as too many.
func dirty() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 1 << 62
	}
	var kb int64
	found := 0
	for line := range bytes.Lines(b) {
		for _, k := range [][]byte{[]byte("Dirty:"), []byte("Writeback:")} {
			if v, ok := bytes.CutPrefix(line, k); ok {
				f := bytes.Fields(v)
				if len(f) == 0 {
					return 1 << 62
				}
				n, err := strconv.ParseInt(string(f[0]), 10, 64)
				if err != nil {
					return 1 << 62
				}
				kb += n
				found++
			}
		}
	}
	if found != 2 {
		return 1 << 62
	}
	return kb << 10
}
