package nvidia

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

type devno struct{ major, minor uint32 }

// sysStat is a node's device numbers.
func sysStat(fi os.FileInfo) (devno, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return devno{}, false
	}
	return devno{unix.Major(st.Rdev), unix.Minor(st.Rdev)}, true
}
