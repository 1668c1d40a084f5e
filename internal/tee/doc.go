// Package tee obtains hardware evidence for a run: a Provider asks the
// platform for a report whose report_data is the run's binding (64
// bytes), and returns the evidence with what it is. Two providers:
//
//   - configfs-tsm: the kernel's /sys/kernel/config/tsm/report interface
//     (via go-configfs-tsm), which on an SEV-SNP or TDX guest returns a
//     real report (and its certificate table); elsewhere its probe is
//     unavailable, with the reason.
//   - software: reports signed by a key of this host, for tests and
//     wiring only. Its evidence says "software" everywhere, is never
//     accepted under a vendor's root (evidence.Verify refuses it with
//     evidence-software unless the verifier explicitly allows it), and
//     the provider is never chosen unless asked for by name.
//
// Select chooses one by name; configfs-tsm is the default, software
// never is. The kernel's files are read under an injected root
// (ConfigFS.Root), so tests run on a tree laid out as configfs lays it
// out. That the kernel's report carries the binding in report_data is
// the verifier's to check (evidence.Policy.ReportData), not this
// package's.
//
// Verification is package evidence's; this package only obtains.
package tee
