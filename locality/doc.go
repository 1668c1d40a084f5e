// Package locality is sandbox.locality/1 (docs/spec/locality.md): a
// falsifiable claim that the host of a run was within a region when it
// ran, made of round trips to locality anchors.
//
// A locality anchor is a principal with a published Ed25519 key and a
// published position. The anchor, never the host, measures a round trip:
// it hands the host a fresh random nonce, the host answers with its
// signature over the nonce, the anchor's key and the run's binding, and
// the anchor signs a measurement of the round-trip time its own monotonic
// clock saw. Nothing carries a signal faster than light in a vacuum, so
// half the round trip times c is an upper bound on the distance between
// the anchor and whoever held the host key; processing at either end and
// every detour of the path only add time, so a host can make itself look
// farther, never nearer.
//
// Invariants:
//   - Verify recomputes the verdict from the signed measurements, the
//     published anchors and the expected host key and binding alone; it
//     trusts nothing the claim says that an anchor did not sign, and the
//     region it checks is the one the claim names.
//   - Every quantity on the wire is an integer (micro-degrees, metres,
//     microseconds, Unix seconds); the one floating-point step, the
//     great-circle distance, is rounded up to whole metres and then
//     widened by 1 % for the shape of the Earth, so the rule errs only
//     towards "too far".
//   - Parse and Verify never panic on any input; every refusal is a
//     *reject.Error naming its code and where.
//   - The claim holds only for the host key it names: a key shared with a
//     machine near an anchor would pass for it. Tying the key to one
//     machine is the TEE report's part, not this package's.
//
// Anchor is the anchor's side (an http.Handler), Measure the host's,
// NewClaim puts measurements together, Verify checks a claim.
package locality
