// Package audit reads the kernel's audit records that say what the kernel
// refused a run: Landlock's denials (ABI 7 and later), which the kernel
// reports through the audit subsystem while audit is enabled.
//
// It only listens. It joins the audit netlink socket's read-only
// multicast group (CAP_AUDIT_READ), so it neither replaces nor disturbs
// an auditd; it never enables audit itself (that is the operator's
// choice: auditctl -e 1, or audit=1 on the kernel command line), except
// through SetEnabled, which exists for tests that restore the setting.
//
// Invariants:
//   - Every record is hostile input: the paths in it were chosen by the
//     guest. Parse never panics (FuzzParse) and keeps only the fields
//     asked for; audit's own encoding (quoted, or hex where a value holds
//     a space, a quote or a control character) is undone.
//   - A Listener holds a bounded number of records (MaxRecords); past
//     that it only counts, so a flood of denials cannot exhaust the host.
//   - Fence writes one user record (type AUDIT_USER_MSG) through the
//     kernel's queue and waits until it comes back: every record queued
//     before it has then been delivered, since the queue is first in,
//     first out. That is the only record this package writes.
package audit
