//go:build linux

package confine

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LoadFilter installs a seccomp filter on the calling thread (and so on
// every process it then starts).
func LoadFilter(insns []Insn) error {
	if len(insns) == 0 {
		return errors.New("no seccomp filter in the spec")
	}
	f := make([]unix.SockFilter, len(insns))
	for i, in := range insns {
		f[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp: install filter: %w", err)
	}
	runtime.KeepAlive(f)
	return nil
}
