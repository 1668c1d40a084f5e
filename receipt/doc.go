// Package receipt seals and opens JCR-1 energy receipts.
//
// A receipt accounts for the energy one run spent, per device class, in
// integer microjoules, with every reading tagged by its provenance:
//
//   - HwShunt: read from a live hardware energy counter;
//   - ModelBased: derived by a stated model from a measurement or a count
//     (a run's share of a host counter by CPU time; WASM fuel times a
//     calibrated cost);
//   - Estimator: no measurement at all (wall time times a rated power).
//
// Per class, measured_uj is the sum of the run-scope HwShunt readings and
// estimated_uj the sum of the run-scope ModelBased and Estimator readings.
// Host-scope readings give context (the whole-host figure a share was taken
// from) and alt-scope readings are another model's figure for the same run
// energy (WASM fuel); neither counts towards the totals. A receipt whose totals are not exactly
// those sums is refused.
//
// Wire form (docs/spec/receipt.md): COSE_Sign1 (RFC 9052, tag 18) with alg
// EdDSA (-8; -19 is accepted too), a protected header of exactly alg,
// content type "application/jcr-1+cbor" and kid (the content address of the
// signer's public key), an empty unprotected header, and a payload in RFC
// 8949 core-deterministic CBOR. Open refuses non-canonical bytes at every
// level, unknown fields, unknown critical headers, other algorithms, bad
// signatures and untrusted signers, each with its own reject.Code.
package receipt
