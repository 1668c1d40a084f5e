// Package key holds the Ed25519 keys that sign records, their identifiers,
// and the set of keys a verifier has been told to trust.
//
// A key's ID is the content address of its 32 public-key bytes. Its text form
// is "ed25519:" followed by 64 lowercase hex digits. A Trust set is built only
// from keys the caller names: nothing is trusted implicitly, and a valid
// signature by a key outside the set is reported as its own failure
// (reject.UntrustedKey), distinct from a bad signature.
package key
