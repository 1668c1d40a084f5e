// Package cgroup gives each run a control group of its own before it
// starts, on cgroup v2 and on the v1/v2 hybrid some hosts (these
// development machines among them) still mount.
//
// Detect reads the layout under a cgroup root (a parameter: tests use fake
// trees). A Group spans every hierarchy that has a controller the caller
// asked for: the v2 hierarchy where one is mounted, and each v1 controller
// hierarchy (cpuacct, memory, pids, cpu, freezer) on a hybrid. Groups live
// under a "sandbox" parent that this package creates. The run's CPU time
// comes from the group: cpu.stat usage_usec on v2, cpuacct.usage on v1.
//
// Processes are placed with AddProc (or at clone time with the v2
// directory's descriptor, CLONE_INTO_CGROUP); an in-process run (S2 runs
// on a locked OS thread of the host) is placed with AddThread, which v1
// allows per thread and v2 only in threaded subtrees, which this package
// does not set up: there AddThread reports ErrThreadsUnsupported and the
// caller uses the thread's own CPU clock instead.
//
// SetDevices makes a group refuse every device but those listed: v1's
// devices controller (devices.deny a, then devices.allow), or on the
// unified hierarchy a BPF_PROG_TYPE_CGROUP_DEVICE program assembled from
// raw instructions and attached beside any an ancestor has.
package cgroup
