//go:build !linux && !darwin

package tree

import "syscall"

// idOf: no identity here, so every file is read again.
func idOf(*syscall.Stat_t) (fileID, bool) { return fileID{}, false }
