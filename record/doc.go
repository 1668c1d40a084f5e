// Package record is the durable run record of seed 000 ("the record is
// the run"): an append-only, hash-chained list of segments belonging to
// one unit under one grant set. docs/spec/run-record.md is its
// specification; conformance/v1/durable.json holds its wire vectors.
//
// A record is JSONL (internal/chain's discipline): its first line is the
// genesis entry naming the unit and the grant set, every further line one
// segment in canonical JSON (internal/jcs's profile). The head is
// replayed, never stored:
//
//	head₀ = BLAKE3("sandbox.runrecord/1" ‖ unit ‖ grants)   (raw 32-byte digests)
//	headₙ = BLAKE3(headₙ₋₁ ‖ segmentₙ)                      (the segment's line, no newline)
//
// Segments are Executed (an attestation's address), Suspended (a
// snapshot: the retained filesystem root, the memory image where one is
// kept, the environment manifest), Resumed (the snapshot restored and
// the idle energy the parked state drew, with its provenance), Closed,
// Claimed, Placed, Forked (a fork's first segment: the parent record
// and head its state was taken from, and that snapshot; the record is
// parked there until it is resumed), Exposed (a preview opened: a port,
// the address of its token, its expiry) and Unexposed (a preview
// withdrawn before its expiry, and why).
//
// Invariants (Apply refuses each with its reject code):
//   - Executed and Suspended only while active (phase); Resumed only
//     while parked (phase), with the snapshot of the last suspension,
//     identical by address (snapshot-mismatch); nothing after Closed
//     (closed); Closed at any point, parked too; Forked only first.
//   - One run is one execution: an Executed segment naming an
//     attestation an earlier one named is refused (invalid), so that no
//     run's energy is counted twice.
//   - Exposed and Unexposed only while active (phase). Each preview is
//     new: an Exposed segment naming a preview an earlier one named is
//     refused (invalid); an Unexposed segment names a preview open now,
//     on its port (invalid). A suspension ends every open preview.
//   - A record verifies only from its genesis: every line is checked,
//     in order, and the head is recomputed; a file that does not parse
//     is an error, never a shorter history.
//   - Two records cannot be spliced: the genesis binds the unit and the
//     grant set, and a continuation under others is refused (splice).
package record
