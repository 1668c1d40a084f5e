// Package verify checks sealed runs and their records without trusting
// the host that made them: the public entry point for other programs.
//
// Dir verifies a whole run directory in one call: the attestation
// (canonical JSON, the signer's key not weak, its Ed25519 signature over
// JCS(claim), the signer trusted), then every record it binds beside it
// (unit, grants, decision log, JCR-1 receipt, journal) by content
// address, each canonical and valid and consistent with the claim, what a
// verifier can re-derive (the required tier, the devices, the run's
// window), the journal's outcome entry against the claim's outcome and
// the receipt's fuel, the outputs against that entry, and that nothing
// else is in the directory (a journal the claim does not bind included). docs/spec/run-directory.md is the
// normative order; the conformance pack (conformance/v1) is its test.
//
// A Verifier checks single files too: a file that is not an attestation
// is recognised by name or content (receipt, unit, grants, decision log,
// public key) and checked on its own. DecodeUnit, DecodeGrants and
// DecodeDecisions read the unsigned records strictly.
//
// Every refusal is a *reject.Error with a stable code; nothing here
// writes, and nothing trusts a key it was not given.
package verify
