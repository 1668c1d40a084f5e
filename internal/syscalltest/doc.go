// Package syscalltest counts the system calls this process, and every
// process it starts, makes while a function runs, from the kernel's own
// tracepoints (perf stat): benchmarks report how many sync calls a
// sealed run costs (issue 33's per-run fsync count) from what the
// kernel was asked, not from the code's own bookkeeping. Counting stops
// nothing: unlike strace, perf neither stops the threads it counts nor
// stands between a fork and its exec.
package syscalltest
