// Package host is the one API every front end calls (the CLI today, the
// server and the MCP tools later): take a unit and its grants, compute the
// required tier, pick the executor that has earned that rung on this host,
// run it under the Enforcer with a replay journal, seal the receipt and
// the attestation, and store the run directory by content address.
//
// Invariants:
//
//   - No front end assembles a run on its own; Run is the only way to one.
//   - A tier that has no working executor here is refused with the tier,
//     the probe's reason and the tiers that are available; nothing is ever
//     run at another tier unless the caller asked (--tier with --escalate),
//     and the attestation records required tier, chosen tier and why.
//   - A run directory appears complete or not at all: it is written under
//     a temporary name, every file made durable, then renamed to
//     runs/<attestation address hex> and the parent fsynced
//     (store.Partial.Commit).
//   - The image is kept in the blob store by content address, so that a run
//     can be replayed later.
package host
