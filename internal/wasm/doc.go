// Package wasm is the S2 executor: a WebAssembly module (WASI preview 1)
// run on wazero with every host call brokered.
//
// Invariants:
//
//   - The module is instrumented for fuel (internal/fuel) before it is
//     compiled; the fuel budget comes from the unit's Cpu compute grant
//     through a documented model (Model), and running out ends the run with
//     its own outcome. A wall-clock deadline closes the module through
//     wazero's WithCloseOnContextDone, which also makes cancellation stop a
//     spinning guest. Memory is capped in pages.
//   - The guest's only way to the host is the broker: a file system mounted
//     at "/" that shows only the storage grants (at their host paths, with
//     their ancestors as empty virtual directories), opened beneath each
//     grant with openat2(RESOLVE_BENEATH) so no symlink or ".." leads out;
//     clocks and randomness that are real only when granted and
//     deterministic otherwise; a key-value host module ("sandbox_kv") gated
//     by kv grants. There are no sockets. Every decision goes through the
//     Enforcer and into the decision log; a denied call fails in the guest
//     with the WASI errno (EACCES for a path, EPERM for a quota).
//   - Every nondeterministic input (real clock reads, real random bytes,
//     file system results, key-value results) is appended to the replay
//     journal. Replaying serves the same inputs from the journal instead of
//     the host, so the run can be re-executed exactly, anywhere, without
//     touching the host's files.
package wasm
