package host

import (
	"io/fs"
	"syscall"
)

// fileID identifies a file's contents without reading them: where any
// of these differ, the contents may.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

func (id fileID) zero() bool { return id == fileID{} }

// idOf is fi's identity; zero where the system does not say it, and
// for a file anyone but root could write. A write through a shared
// mapping to a page already dirty moves neither time (on tmpfs none
// ever does), so a file a guest or a tenant may open for writing, in a
// run or between runs, can change under an unchanged identity; no guest
// runs as the host's root, and a file of root's that only root may
// write (the host's programs) changes only as root changes it.
func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fileID{}
	}
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
