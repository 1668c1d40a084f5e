// Package audittest turns the kernel's audit on for a test and back off
// after, one test at a time across every test process on the host.
//
// Audit is host-wide: two test binaries that toggle it concurrently (go
// test runs packages in parallel) would switch it off under each other.
// WithEnabled holds an exclusive lock on a file in the temporary
// directory while it runs, and restores the setting it found.
package audittest
