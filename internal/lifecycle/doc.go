// Package lifecycle is what a seeded sandbox's preservation rests on
// (seed 004): the owner claim a seed binds and the origin it came from,
// the versioned lifecycle record kept beside a sandbox's run record, the
// fixed operation window that bounds and accounts for the work done on
// it, and the preservation fence that an idle deadline, a stuck run and
// an expiry all pass before any teardown.
//
// Invariants:
//   - Nothing read grants destruction. Decoding a record classifies it;
//     only a bound, verified record (or a complete legacy one) yields an
//     owner, and no record yields closing authority.
//   - A record this reader cannot read for sure (missing, malformed, of
//     a version it does not support, pending, bound but unverified,
//     closing, or in a state it does not know) is retained: Decide never
//     parks it.
//   - Decide parks only when quiescence (the kernel's frozen cgroup, never
//     a process list or anyone's word), ownership, the incarnation and a
//     complete, verified checkpoint that outlives the idle window are all
//     proved, and no request came since the idle clock was sampled. It
//     never returns a destroy.
//   - The operation window refuses an operation it has no slot for before
//     the operation has any effect; an operation whose outcome was lost
//     (a reset) is kept as an obligation until it is settled.
package lifecycle
