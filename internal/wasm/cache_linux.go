//go:build linux

package wasm

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// identity is what says a cache entry has not changed since it was
// sealed: a write changes its change time, a replacement its inode.
func identity(p string) (entryID, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return entryID{}, false
	}
	return entryID{ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim.Nano()}, true
}

// lock takes the cache directory's lock, shared between processes; the
// returned function releases it.
func (c *compiledCache) lock() (func(), error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
