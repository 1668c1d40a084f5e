// Package gate is JCP's gate (docs/spec/jcp.md §5): before any executor is
// invoked, it verifies the chain a run is presented with, checks the run
// against every grant's effective terms, and reserves the run's budget at
// every grant of the chain in one ledger entry; after the run it posts
// what the sealed receipt says was spent, and releases the rest. Every
// decision, allow and deny alike, is sealed by the host's key
// (application/jcp-decision+cbor): an allowed run's decision goes into its
// run directory and is cited by its attestation, a denied one is kept
// under the state directory.
//
// The gate owns no budget state: that is the ledger's (internal/budget).
// It never runs anything: the engine (internal/host) asks it first.
package gate
