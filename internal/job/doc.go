// Package job is what the host hands an executor and what it gets back:
// the unit and its grants, the Enforcer every host call must pass, the
// journal to record (or replay) nondeterministic inputs, where output goes,
// and, in return, how the run ended and what it consumed.
//
// Executors never seal anything; the host does, from the Result.
package job
