package tree

import "syscall"

// idOf identifies a file by what stat says of it.
func idOf(sys *syscall.Stat_t) (fileID, bool) {
	return fileID{uint64(sys.Dev), sys.Ino, sys.Size, sys.Mtimespec, sys.Ctimespec}, true
}
