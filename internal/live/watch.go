package live

import "time"

// WatchEvent is a change a watch saw. Op is create, modify, delete,
// rename (From the old path, where it was watched too), overflow (Why:
// events were lost) or ended (Why: the watch is over). Paths are the
// sandbox's (its storage is at the same paths).
type WatchEvent struct {
	Op   string
	Path string
	From string
	Dir  bool
	Why  string
}

// Bounds of a watch.
const (
	MaxWatchDirs = 4096
	WatchBuffer  = 1024
	WatchCheck   = time.Second // how often a watch asks whether its sandbox is still live
)
