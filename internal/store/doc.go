// Package store owns what the state directory holds between runs: the
// host key, sealed runs (runs/), content by address (blobs/), key-value
// namespaces (kv/), compiled-code caches (cache/), S1 roots and CA
// bundles (roots/) and kept writes (kept/). The directory itself and the
// leases that name temporary things are package state's; the layout is
// docs/spec/state.md.
//
// Invariants:
//
//   - A run directory appears complete or not at all: it is written as
//     runs/.partial-LEASE-N (Begin), every file and entry made durable
//     at once (one syncfs; a sync of each while the machine has much
//     else to write back: Syncer), then renamed to runs/<attestation
//     address hex> and runs/ fsynced (Partial.Commit): two syncs a run.
//     Concurrent commits share the fsync of runs/ (group commit).
//   - Listing reads; it never trusts. Runs reports a damaged run
//     directory as damaged; verification is package verify's.
//   - A blob is stored once under its address and checked against it
//     whenever it is read.
package store
