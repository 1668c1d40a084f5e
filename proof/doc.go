// Package proof is the proof matrix's record: a proof cell says, signed
// by a host's key, what a substrate did on one target (its OS, kernel,
// CPU, virtualisation, accelerators): the conformance pack's counts and,
// for every tier of the ladder, a sealed run that verifies (green), a
// failure where the tier should have worked (red), or the probe's reason
// it cannot work here (unavailable). A cell is an in-toto Statement
// (subjects: the substrate binary, the pack, each sealed run) in a DSSE
// envelope, verifiable by any DSSE verifier given the key
// (docs/spec/proof.md). Cells are appended to a proof log whose Merkle
// checkpoints others may hold, so that a red cell cannot be removed or
// edited quietly.
package proof
