package wasm

import (
	"fmt"
	"os"
	"syscall"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/fuel"
)

// ProbeKey is what the probe's result depends on: this program (by file
// identity: its runtime is built in), wazero's version, the fuel
// instrumentation and the memory limit.
func (e *Executor) ProbeKey() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("wasm: no file identity for %s", exe)
	}
	return fmt.Sprintf("%s %d:%d %d %d.%d %d.%d wazero %s %s pages %d", exe, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec,
		e.version, fuel.Version, e.cfg.MemoryLimitPages), nil
}

// On Linux, S2's probe is kept.
var _ executor.ProbeKeyer = (*Executor)(nil)
