// Package artifact recognises sealed artifacts on disk and verifies each
// one completely.
//
// A run directory holds one run's records under fixed names (Layout): the
// attestation, and beside it every object the attestation binds. Verifying
// an attestation (alone or in its run directory) checks its signature,
// canonical form and signer, and then that every bound object is present
// beside it, hashes to the bound address, is itself canonical and valid,
// and agrees with the claim (the receipt is for the same unit and signed by
// the same key; the unit binds the same grants and image). A file that is
// not an attestation is recognised by name or content (receipt, unit,
// grants, decision log, public key) and checked on its own.
package artifact
