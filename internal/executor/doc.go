// Package executor states what an executor is: the contract between the
// engine (internal/host) and each backend that runs units at a tier (S0
// internal/bare, S1 internal/native, S2 internal/wasm, S5 internal/vm).
//
// An Executor runs a Job: the unit and its grants, the Enforcer every
// host call must pass, the journal to record (or replay)
// nondeterministic inputs, where output goes; it returns a Result: how
// the run ended and what it consumed. Executors never seal anything; the
// engine does, from the Result.
//
// What an executor can do beyond running a job it offers as small
// capabilities, each an interface the engine asks for with a type
// assertion, never a switch on a tier or a backend's type:
//
//   - DeviceGiver: it gives a run devices besides the CPU.
//   - Limiter: it has limits of its own, which a unit records.
//   - Prewarmer: it can prepare its next run ahead of it.
//   - RootProber: it runs units in an image's root filesystem.
//   - ProbeKeyer: its probe may be kept across processes.
//   - Helpers: it has the host run programs of sandbox's own.
//   - io.Closer: it holds something between runs.
//   - Sessioner: it opens live sessions (sandboxes) whose processes
//     and files last from one exec to the next; a Session may be a
//     Freezer (stilled and read back, from outside the guest) and a
//     Snapshotter (its memory written to an image, and a Resumer
//     reopens a session from one).
//
// Invariants every executor keeps (executortest checks them on each):
//
//   - A probe is available, or unavailable with its reason; an
//     executor whose probe is unavailable is never given a job.
//   - Run returns an error only when the job did not run; once it ran,
//     its Result says how it ended (Outcome), with Start and End.
//   - A deadline ends a run as attest.Deadline; a cancelled context
//     ends it (interrupted, then killed after a grace period); a context
//     cancelled with the cause ErrBudget ends it at once as
//     attest.BudgetExhausted.
//   - When Run returns nothing the job started still runs: its Cgroup,
//     when it has one, holds no process.
//   - Every refusal of what the grants do not allow is a decision in
//     the job's Enforcer log; an executor that cannot enforce a grant
//     refuses the job (S0 enforces nothing: it refuses every grant whose
//     only point is a restriction).
//   - A session runs each exec as a job, under the contract above, and
//     an exec's end never ends the session; Close ends everything the
//     session runs.
//
// Backends import this package and never each other (deps_test.go);
// what two of them share lives below both (internal/confine).
package executor
