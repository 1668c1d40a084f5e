// Package note is the C2SP signed-note format and the tlog checkpoint
// that a fleet's aggregate is published as (seed 000, C10): a text
// ending in a newline, a blank line, and one signature line per signer,
// "— NAME base64(key ID ‖ Ed25519 signature)", the key ID being the first
// four bytes of SHA-256(NAME ‖ 0x0A ‖ 0x01 ‖ public key); a verifier key
// is written NAME+hex(key ID)+base64(0x01 ‖ public key). A checkpoint's
// text is "ORIGIN\nSIZE\nbase64(ROOT)\n" (C2SP tlog-checkpoint).
//
// Held to the spec's own example (shared vectors); an opener accepts a
// note only if a signature it knows verifies, ignores signatures by keys
// it does not know, and refuses anything malformed, naming it.
package note
