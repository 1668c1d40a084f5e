// Package authority says who may grant what: a principal's policy, and
// the one check every grant passes before anything runs (DESIGN.md §12).
//
// A principal is whoever asks for a run or a sandbox: the machine's
// owner at the service's socket (the operator), each API token, each MCP
// connection. Each has a Policy: the host path roots it may grant
// beneath (read-only or read-write), the network destinations and
// injected secrets, key-value namespaces, tiers, device classes with a
// joule ceiling each, and images. A Principal is a name and a chain of
// policies: its own, then the narrowings it asked to be held to (an MCP
// connection's policy, which a model's tool arguments cannot widen). A
// grant passes only if every policy in the chain allows it.
//
// Invariants:
//
//   - The zero Policy allows nothing. A principal with no policy of its
//     own gets Default: no host path beyond its own sandboxes'
//     workspaces, no network, no secret, no key-value namespace, the
//     confining tiers (S1, S2, S5), the CPU at any budget, any image the
//     operator imported. Only the operator gets Operator (everything).
//   - Narrowing only narrows: a chain is checked policy by policy, so a
//     later policy can refuse what an earlier one allows and never the
//     other way round.
//   - Check is pure: it reads no file and follows no link. Paths are
//     compared as the clean absolute paths grants carry; the executors
//     then open them without following any link (internal/hostpath), so
//     a path beneath an allowed root is really beneath it.
//   - A refusal is a *DeniedError that names the principal, the grant
//     (in the command line's syntax), the rule and why; it wraps
//     grant.ErrDenied (the denied category). Log keeps each refusal in a
//     hash-chained file (internal/chain's discipline).
//
// The policy source is replaceable: JCP delegation chains (docs/spec)
// will yield the same Policy values and pass through the same Check.
package authority
