// Package chain is the one discipline of every hash-chained log this
// project keeps: run records (seed 000), the S7 audit log (seed 003) and
// the build ledger.
//
// A log is a file of entries only, one canonical JSON value per line.
// Its head is never stored: it is replayed from the entries on every
// open, so a file cannot assert a head it did not earn. Each step is
// head' = BLAKE3(head ‖ entry), over the 32 raw bytes of the head and the
// entry's bytes as they stand on their line (without the newline).
//
// Invariants:
//   - An entry is acknowledged only once its line, newline included, is
//     written and fsynced; the caller advances its in-memory head after
//     that, never before. A crash therefore leaves the file at or ahead
//     of what was acknowledged, never behind. A batch (AppendBatch, a
//     group commit) is one write and one fsync, acknowledged as a whole.
//   - A missing file is the genesis. A final fragment without its newline
//     is an append that was never acknowledged: it is not an entry (Read
//     says how many bytes it holds) and the next append cuts it first.
//     Anything else that is not a whole entry (an empty line, a line the
//     caller's decoder refuses) is a fatal, named error, never a shorter
//     history: the entries that cannot be read are the ones the log
//     exists to hold.
//   - A failed append (a full disk) is cut back: the file holds whole
//     entries only, and the head does not advance.
//   - What a log cannot show by itself: a truncation that drops entries
//     and leaves a consistent list still replays. Whatever cites a head
//     (an attestation's audit_prev, a continuation's record head) is the
//     evidence that catches it.
package chain
