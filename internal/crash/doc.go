// Package crash injects faults for tests: at a named point of its work,
// a process sends itself a signal, as if it had been killed (SIGKILL),
// hung up on (SIGHUP) or interrupted there.
//
// It does nothing unless the environment variable SANDBOX_CRASH_AT names
// a point ("sealing", or "sealing:HUP" for another signal than SIGKILL);
// it is read once, at start. The points are listed in Points, so a test
// can go through every one.
package crash
