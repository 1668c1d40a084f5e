// Package boot makes and checks the boot image of an S5 guest: a Debian
// kernel, an initramfs the project builds (the guest agent as /init, the
// kernel modules it needs, a minimal /etc) and a manifest,
// sandbox.vm/1, that names both by content address.
//
// Invariants:
//   - Building is reproducible: the same kernel and agent give the same
//     initramfs bytes, hence the same addresses (entries sorted, times,
//     owners and inode numbers fixed).
//   - Nothing is booted that does not match its address: Open hashes the
//     kernel and the initramfs and refuses either when it differs from
//     the manifest, before QEMU is started.
package boot
