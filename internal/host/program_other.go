//go:build !linux

package host

import "io/fs"

// fileID is not known here: every program is hashed as it is read.
type fileID struct{ size, mtime, ctime int64 }

func (id fileID) zero() bool { return true }

func idOf(fs.FileInfo) fileID { return fileID{} }
