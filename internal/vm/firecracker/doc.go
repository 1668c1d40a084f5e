// Package firecracker drives a Firecracker microVM monitor over its API
// socket (HTTP on a Unix socket), as the seeds' reference S5 executor
// does: machine configuration, boot source, drives, vsock, start, pause
// and resume, and full snapshots.
//
// Invariants:
//   - Every request the driver sends is valid under Firecracker's
//     published API schema (testdata/firecracker-api.json, converted from
//     src/firecracker/swagger/firecracker.yaml of
//     firecracker-microvm/firecracker at 81b38b9d, Apache-2.0); the tests
//     send them to a fake server that checks each one against it.
//   - A refusal from Firecracker is an error carrying its fault message.
//   - Probe says why Firecracker cannot serve S5 on this host: no binary,
//     no KVM, or, where both exist, that the guest transport it needs
//     (vsock; the QEMU executor's agent speaks virtio-serial) is not
//     built. It never claims the rung.
package firecracker
