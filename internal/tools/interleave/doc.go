// Command interleave times how long programs take to run, started in
// turn: one run of each, then the next round, so that a change in the
// machine's load lands on every program alike. hyperfine times one
// program's runs in a row, and on a shared machine a burst of load
// within its run of one program moves that row alone by more than the
// tenths of a millisecond a start-up change is worth
// (scripts/bench-startup runs both).
//
//	go run ./internal/tools/interleave -n 500 ./empty './sandbox version'
//
// Each argument is a program and its arguments, split at spaces (no
// shell). Its output goes to /dev/null. For each program it prints the
// median, mean and 10th percentile of the wall time from start to exit,
// the median CPU time (user and system, every thread), and the median
// over the first program's. The exit status is 1 when a program cannot
// be started or exits other than 0.
package main
