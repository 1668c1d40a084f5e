// Package trail is the S7 audit trail (seed 003): a host's append-only,
// hash-chained log of the sovereign runs it sealed, kept by the one log
// discipline of internal/chain (entries only, the head replayed on open,
// an entry fsynced before the head advances, unparseable = fatal).
//
//	head₀ = BLAKE3("sandbox.audit/1")
//	headₙ = BLAKE3(headₙ₋₁ ‖ entryₙ)      (the entry's canonical line)
//
// Each S7 run's attestation carries audit_prev, the trail's head before
// it (sandbox.attestation/2), and the run is appended after it is
// sealed, under one lock, so that the audit_prev values of a host's S7
// runs are its trail's heads in order.
//
// What the trail cannot show by itself: a truncation that drops entries
// and leaves a consistent list still replays, from genesis, to a head. A
// restarted host whose trail file was reset would seal its next run with
// audit_prev = head₀, as a first run does. What catches both is the
// audit_prev values the attestations carry: they are the evidence, and
// the trail is the index into them (Verify with the attestations' values
// checks the trail reaches each).
package trail
