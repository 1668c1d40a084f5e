// Package s1init is the inside of an S1 run: the program that is pid 1
// of the run's namespaces. It is deliberately small (of the rest of the
// module it imports only internal/hostpath and internal/confine, which
// import nothing heavy) so that the helper binary built from it,
// cmd/sandbox-s1, starts in a few milliseconds.
//
// Init reads a Base on fd 3 and builds the shared part of the run's root
// (read-only system binds, a private /tmp, a minimal /dev, a fresh
// /proc) while it waits for the Spec, the second value on fd 3; then it
// mounts the storage grants (idmapped or overlaid), pivots into it, and
// starts the program from one locked OS thread on which it has first
// dropped every capability, become the unprivileged user, set
// no_new_privs, enforced Landlock and installed the seccomp filter: a
// child inherits the creating thread's credentials and filters, so the
// program is confined while init, on its other threads, keeps what it
// needs to reap, forward signals and commit quota'd writes. It reports a
// Status on fd 4.
//
// Where the program has a host identity of its own (Exec.HostUID, as
// root), that thread instead clones the launcher (this helper again)
// into a new user namespace whose maps hold the program's user alone,
// mapped to that host id; the launcher applies the same confinement to
// itself and executes the program (launch_linux.go). A warm init starts
// its run's launcher ahead, once its base is built (Base.Launcher), and
// the run's program starts in it where the spec allows
// (Spec.LauncherReady).
//
// The same helper starts an S5 VM's monitor (QEMU) confined: in a mount
// namespace where every mount but the VM's directory and its read-write
// grants is read-only, with a bounding set of three capabilities and
// no_new_privs (confine.RunMonitorJail, which Main runs for
// confine.MonitorJailArg).
package s1init
