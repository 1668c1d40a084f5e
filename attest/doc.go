// Package attest seals and verifies attestations: signed statements of what
// ran, at what tier, under what grants, on what hardware, for what cost.
//
// An attestation is a claim (Claim) in canonical JSON (RFC 8785, in the
// profile of internal/jcs: no floats, no integers at or above 2^53) and an
// Ed25519 signature over JCS(claim) itself, as seed 001 says (the same
// primitive as ARL-S, so any Ed25519-over-JCS verifier can check it; the
// claim's "type" member separates its domain), carried together as the canonical JSON envelope
//
//	{"claim":{...},"signature":"<base64url, no padding>"}
//
// Its content address is the BLAKE3 of JCS(claim), which are exactly the
// bytes of the "claim" member of a canonical envelope. The claim binds every
// other record of the run by content address (unit, image, grants, decision
// log, receipt, replay journal). Verify checks the envelope's canonical
// form, the claim's fields, the signature, and that the signer is trusted; a
// valid signature by an untrusted key is reject.UntrustedKey, distinct from
// reject.Signature. Whether the bound objects are present and match is the
// caller's check, since only it knows where they are.
package attest
