// Package jcp is JCP/1 (docs/spec/jcp.md): grants a principal signs for
// another to spend energy on its behalf, delegation chains that may only
// narrow, the invocation an audience presents a chain with, amendments that
// only tighten, revocations, mint policies (standing grants) and
// checkpoints, each a COSE_Sign1 in the JCR-1 profile over deterministic
// CBOR.
//
// Open reads any of them from untrusted bytes; Verify checks a chain from
// trusted root keys alone, offline; Narrows is the attenuation lattice
// (child ⊑ parent), with a refusal code per term that widens; Admit
// checks what a run asks for against a grant's terms. What needs state
// (budgets, counts, rates, revocations, amendments) is the budget ledger's
// (internal/budget), and the decision before a run is the gate's
// (internal/gate).
//
// Every refusal is a *reject.Error naming what and where.
package jcp
