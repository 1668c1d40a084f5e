// Package grant is the capability model: what a unit of work may touch, and
// the Enforcer that answers every request against it.
//
// Invariants:
//
//   - The zero Set grants nothing. Every resource (network destination,
//     storage path, key-value namespace, clock, randomness, exec of a
//     binary, compute device class) is reachable only through a grant
//     naming it.
//   - Credentials appear only by reference ("env:NAME" or "file:/path"),
//     never by value; the reference is resolved by the host, outside the
//     unit.
//   - An exec deny is absolute: no allow, and no ordering, overrides it.
//     An exec allow-list, when present, admits nothing else.
//   - A Set has one canonical form (Normalize): lists sorted, duplicates
//     merged, conflicts refused. Its content address is the BLAKE3 of that
//     form in canonical JSON, and that address is what units and
//     attestations bind.
//   - The Enforcer records every decision, allow and deny, in order, in a
//     Log whose canonical JSON the attestation binds by address. Identical
//     consecutive decisions are kept as one entry with a count.
//   - A storage grant's host object is reached one way, Reach (walked
//     without following a link, checked against the host's guard, a
//     directory), by the host before any executor runs and by every
//     executor when it uses the grant.
//
// Grants are written on the command line (Parse) or in a JSON file
// (ParseFile); both give the same Set. Storage paths are absolute on the
// host, and a unit sees a storage grant at the same absolute path.
package grant
