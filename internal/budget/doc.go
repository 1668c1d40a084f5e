// Package budget is the JCP budget ledger (docs/spec/jcp.md §7): the
// append-only, hash-chained log of what every grant of a delegation tree
// has reserved and spent, kept by the one log discipline of
// internal/chain, from which anyone holding the root keys recomputes
// every grant's budget offline (Verify).
//
//	head₀ = BLAKE3("sandbox.jcp-ledger/1")
//	headₙ = BLAKE3(headₙ₋₁ ‖ entryₙ)      (the entry's canonical line)
//
// It owns: which grants and mint policies were admitted, each grant's
// effective terms (its last amendment's), revocations, checkpoints, the
// reservations (numbered 1, 2, …) and what was posted against them, the
// runs and rates counted over each grant's subtree and each policy's
// mints, and the signed heads beside the log (path + ".heads").
//
// It never decides a run: images, models, tiers, hosts, paths, times and
// the invocation's signature are the gate's (internal/gate, with
// jcp.Verify, jcp.Present and jcp.Admit), which hands the ledger a path
// of grants and what to reserve at each. It never trusts a token it is
// handed: each is opened again from its bytes.
//
// Invariants:
//   - One rule set: the live ledger decides every change with the check
//     Verify replays, so what it appends a verifier accepts, and what a
//     verifier refuses it never appended. A refused change appends
//     nothing and changes nothing.
//   - The order of the entries is the order of the decisions: each is
//     decided under one mutex against the state in memory, then written.
//     No reservation ever takes a ceiling past what it allows, under any
//     concurrency.
//   - Nothing is acknowledged before it is durable: a change returns
//     only once its line is written and fsynced. Callers that arrive
//     while a sync is in flight are written and synced together, in one
//     write and one fsync (a group commit); Head and the signed heads
//     are of what is on disk only.
//   - A failed write leaves the ledger refusing every change: what was
//     decided after it is not on disk. Opening the file again replays
//     what is.
//   - A crash leaves the file at or ahead of what was acknowledged: an
//     entry appended but not acknowledged is there on the next open (a
//     reservation outstanding, to be settled), an entry decided but not
//     written is not, and a torn final line is cut, as internal/chain
//     does. Nothing is counted twice.
//   - A ledger cut short or rewritten after a head was signed does not
//     open, and does not verify (head-mismatch).
package budget
