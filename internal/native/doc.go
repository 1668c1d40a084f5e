// Package native is the S1 executor: a native program confined by the
// operating system.
//
// The host starts a helper (this same binary, re-executed as
// "__sandbox-s1-init") in new mount, pid, network, IPC, UTS and cgroup
// namespaces (and a user namespace when not root), already inside the
// run's cgroup. The helper, pid 1 of the run, builds a root for the run
// on a tmpfs: system directories bind-mounted read-only, storage grants
// bind-mounted at their host paths (read-only, read-write, or, with a
// quota, read-write through an overlay whose upper layer is a tmpfs of
// the quota's size, committed to the host directory when the run ends),
// a private /tmp, a minimal /dev and a fresh /proc; it pivots into it and
// starts a second helper ("__sandbox-s1-exec") that, on one locked OS
// thread, sets rlimits, drops every capability and becomes an
// unprivileged user (nobody when the host is root; the mapped invoking
// user, without capabilities, in a user namespace otherwise), sets
// no_new_privs, enforces Landlock rules that match the storage grants, and
// installs a seccomp filter, then execs the program. The init helper
// forwards signals to it, reaps, kills what is left when it ends, and
// reports the status.
//
// The rung is earned by probe: a confined child checks from inside that
// each layer applies (Probe), and S1 is available only when all do.
package native
