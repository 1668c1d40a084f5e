// Package ledger is the build ledger (seed 003's file-backed build
// ledger): an append-only, hash-chained log of what was built from what,
// kept by the one log discipline of internal/chain (entries only, the
// head replayed and every entry checked on open, an entry fsynced before
// the head advances, a file that does not parse a fatal error, never a
// shorter history).
//
//	head₀ = BLAKE3("sandbox.build-ledger/1")
//	headₙ = BLAKE3(headₙ₋₁ ‖ entryₙ)      (the entry's canonical line)
//
// An entry says: from this input (a build's manifest, by address), this
// output (what it made, by address) was built, by this sealed run (its
// attestation). Lookup answers the last output recorded for an input, so
// that a build done once is not done again; the run is the evidence of
// how it was made, and anyone can check it (sandbox verify).
//
// Like the audit trail, a ledger cannot show by itself that it was not
// cut short: a truncation that leaves a consistent list replays. What a
// build cites (the ledger head it was recorded at, Append's answer) is
// what shows it (Verify with the cited heads).
//
// Images and pools (issue 14) are its producers; until they exist,
// nothing in the host appends to it.
package ledger
