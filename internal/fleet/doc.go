// Package fleet is a fleet's aggregate receipt (seed 000, C10): a fleet
// is N items, each its own sealed run; its aggregate is the RFC 6962
// Merkle tree (internal/merkle) over the items in index order, each leaf
// the canonical JSON {"index","input","run"} of one item (its input's
// address and its run's attestation address), published as a signed
// tlog checkpoint (internal/note). Anyone holding the checkpoint and one
// item's proof checks that item alone; two checkpoints of one fleet are
// checked for consistency (the later one extends the earlier).
//
// Running fleets across a service's workers, and `sandbox fleet
// run|verify|prove`, are still to come (issue 14).
package fleet
