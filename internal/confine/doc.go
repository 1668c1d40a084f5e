// Package confine is what confines a process on Linux that more than one
// backend uses: the seccomp filter's instruction form (Insn, its text
// form, LoadFilter) and the monitor jail an S5 VM's QEMU starts through
// (RunMonitorJail: a mount namespace where the host is read-only but for
// the VM's own directory, a bounding set of MonitorKeeps alone,
// no_new_privs and a seccomp filter). Which system calls the filters
// refuse, and why, is internal/confine/syscalls.
//
// It sits below the backends: S1 (internal/native, whose helper runs
// the jail) and S5 (internal/vm, which starts QEMU through it) import it,
// and it imports no backend. It is linked into the S1 helper, which must
// start in a few milliseconds: it imports nothing of the module but
// internal/hostpath, and no package with a heavy initialiser.
//
// Invariants:
//   - A filter whose text form is not whole instructions is refused
//     before anything is executed; an empty filter is never installed.
//   - The jail executes its program only once every step has applied
//     (read-only mounts, each writable directory reached without
//     following a link, the bounding set, no_new_privs, the filter);
//     any failure ends the helper with the reason, before the program.
package confine
