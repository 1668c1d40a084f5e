// Package native is the S1 executor: a native program confined by the
// operating system.
//
// The host starts the run's init (cmd/sandbox-s1, package s1init; or
// this binary, re-executed, where that helper is missing) in new mount,
// pid, network, IPC, UTS and cgroup namespaces (and a user namespace when
// not root) and sends it the base of the root, which init builds at once;
// a long-lived host keeps one such init ready, placed ahead in the cgroup
// made for its run (executor.Placer; docs/s1.md). For a run it moves the
// init into the run's cgroup (unless it is there already) and sends the
// spec: storage grants (read-only,
// read-write id mapped, or, with a quota, an overlay on a tmpfs of the
// quota's size committed when the run ends), and the program with what
// confines it: rlimits, no capabilities, an unprivileged user (nobody when
// the host is root; the mapped invoking user, without capabilities, in a
// user namespace otherwise), no_new_privs, Landlock rules that match the
// grants, and the seccomp filter (internal/confine/syscalls). Init reports how the
// program ended.
//
// As root, each run, and each live sandbox for its whole life, leases a
// host id no other process has (ids_linux.go: a lock file per id in the
// host-wide IDDir, from IDBase..IDBase+IDCount-1): its program is nobody
// inside a user namespace that maps nobody alone to that id, and its
// grants are id mapped to it, so nothing on the host is ever owned by
// it. An id is given back only once init, and with it every process of
// the run, has been reaped.
//
// A unit granted a Gpu (gpu.go) is given the host's NVIDIA GPUs where
// the nvidia probe finds them beneath Config.DevRoot: their nodes bound
// into its /dev, the driver's libraries read-only, its cgroup allowing
// exactly those devices and /dev's own; every other run's cgroup allows
// /dev's own alone.
//
// The rung is earned by probe: a confined child checks from inside that
// each layer applies (Probe), and S1 is available only when all do.
package native
