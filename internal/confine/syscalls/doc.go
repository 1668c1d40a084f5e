// Package syscalls is the seccomp policy of this project's confined
// processes: the groups of system calls an S1 program is refused
// (Denied, Restricted: each with its reason, which docs/s1.md lists and
// a test keeps equal), the S1 filter assembled from them (S1Filter), and
// the filter an S5 VM's monitor runs under in its jail (MonitorFilter,
// MonitorDenied's groups of Denied).
//
// It is shared by S1 (internal/native) and S5 (internal/vm) and imports
// no backend. It is apart from internal/confine because the seccomp
// assembler's tables would slow the start of the S1 helper, which needs
// only the assembled instructions.
//
// Invariants:
//   - Every filter refuses system calls made through another
//     architecture's ABI (i386 int 0x80, x32) before anything else, so a
//     deny list cannot be bypassed.
//   - Each group of MonitorDenied is a group of Denied, by its first
//     name: the monitor is refused nothing S1 explains differently.
//   - Filters are assembled once per process and are the same bytes
//     every time.
package syscalls
