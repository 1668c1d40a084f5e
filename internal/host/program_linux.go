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

// idOf is fi's identity; zero where the system does not say it.
func idOf(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fileID{}
	}
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
