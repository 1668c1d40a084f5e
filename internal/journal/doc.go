// Package journal records every nondeterministic input a run receives, so
// that the run can be re-executed exactly and its record checked.
//
// A journal is a sequence of entries, each one core-deterministic CBOR map
// {"k": kind, "q": request, "r": response} where request and response are
// CBOR values whose shape the kind defines. The file (journal.cbor) is the
// entries concatenated (an RFC 8742 CBOR sequence) and nothing else. Its
// root is a hash chain over the entries' bytes:
//
//	head_0 = BLAKE3("sandbox.journal/1")
//	head_n = BLAKE3(head_(n-1) || entry_n)
//
// and the root is the last head; it is never stored in the file, only
// recomputed, so a file cannot claim a root it did not earn. The
// attestation binds the root.
//
// A Writer appends entries as a run makes requests. A Reader serves them
// back in order during replay and reports a Divergence when the replayed
// run asks for something the original did not.
package journal
