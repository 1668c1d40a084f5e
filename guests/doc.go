// Package guests holds the programs this project runs inside its sandboxes
// in tests, benchmarks and the demo: Go programs built with GOOS=wasip1
// (each in its own directory) and C programs built with clang and
// wasi-libc (in c/). They are built from source by scripts/guests and by
// internal/guestbuild for tests; no binary is committed.
package guests
