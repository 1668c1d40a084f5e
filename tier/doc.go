// Package tier is the isolation ladder S0-S7 and the minimization rule that
// picks a rung for a unit of work.
//
//	S0 Bare          plain host process; only on explicit request, for trusted work
//	S1 Capability    native program confined by the OS
//	S2 Sandbox       WASM with every host call brokered
//	S3 Partition     reserved
//	S4 Unikernel     reserved
//	S5 MicroVM       a guest kernel behind a virtual machine boundary
//	S6 Confidential  S5 inside a TEE whose report is verified
//	S7 Sovereign     S6 with locality pinning and a durable audit trail
//
// Require computes the tier a unit needs from its kind and the needs its
// grants state; it is the lowest rung that satisfies all of them. Choose
// turns that into the tier to run at, given what the caller asked for and
// which tiers this host has earned: it never goes below the requirement
// (except S0 on explicit request for a native unit), never above it unless
// escalation was asked for, and never silently: an unavailable tier is an
// *UnavailableError naming the tier, the probe's reason and the tiers that
// are available. Everything here is pure.
package tier
