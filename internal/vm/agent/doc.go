// Package agent is the init of an S5 guest: the one program the project
// puts in the guest's root (cmd/sandbox-vmagent), started by the guest
// kernel as PID 1. It mounts what the host's Setup frame names, then runs
// commands and moves files on the host's request over its virtio-serial
// port (package wire), and nothing else: it opens no port of its own and
// listens on no network.
//
// Invariants:
//   - It runs inside the VM; everything it does is bounded by the guest
//     kernel and the devices QEMU gave it. The host trusts none of its
//     answers beyond the run's own output (see package vm).
//   - If it cannot go on (no port, a broken connection) it powers the
//     guest off rather than exiting: PID 1 exiting panics the kernel.
package agent
