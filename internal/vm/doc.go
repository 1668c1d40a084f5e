// Package vm is the S5 executor: each run gets a microVM of its own, on
// QEMU's microvm machine, with a Debian kernel and the project's guest
// root (package boot), and its program runs under that kernel, reached
// only through the guest agent's virtio-serial port (package wire).
//
// Invariants:
//   - The accelerator is chosen by proof, not by presence: KVM only when
//     a real boot under it answered within KVMProbeTimeout on this host,
//     else TCG; the one used is in the run's executor name
//     ("qemu-microvm/7.2.22+tcg") and notes, so a TCG run never reads as
//     a KVM run.
//   - Nothing is booted that does not match its content address (the
//     manifest's kernel and initramfs, hashed before QEMU starts).
//   - The guest sees the host's /usr read-only (so the same programs run
//     at the same paths, under the guest's kernel), its storage grants at
//     the same absolute paths over 9p (read-only where granted so, which
//     QEMU enforces), no network device unless it has a net grant or
//     listen ports, and then one that reaches only the run's egress
//     proxy (QEMU's user network with restrict=on and one forwarded
//     address), and is reached only on its listen ports.
//   - A live sandbox's listen ports are forwarded by QEMU from the
//     loopback of the monitor's own network namespace (the jail's), so
//     only a process that enters that namespace (the service, as root)
//     reaches them; nothing of a sandbox listens on the host's network.
//     A port is dialled only once the guest's own tables say something
//     listens on it on an address the forwarding reaches.
//   - Every share is reached as every tier reaches a grant (grant.Reach:
//     no link followed, never the state directory) and held as a clone
//     of the walked directory's mount, whose descriptor QEMU inherits and
//     opens (/proc/self/fd/N): no path is resolved after the check.
//   - The egress proxy listens only on a Unix socket in the VM's own
//     0700 directory and serves only the connections of that VM's QEMU
//     (SO_PEERCRED): nothing of a run listens on the host's network.
//   - QEMU runs in the run's cgroup from its first instruction, so the
//     meter sees the whole VM; it runs under QEMU's own seccomp sandbox
//     (no spawning, no privilege changes).
//   - Every frame from the guest is hostile input (ErrGuest ends the
//     VM); a guest that never answers is ended by the deadline; a guest
//     kernel panic powers the VM off and is reported as such.
package vm
