// Package executortest is the conformance suite of the executor contract
// (internal/executor): every executor runs it from its own tests (S0
// internal/bare, S1 internal/native, S2 internal/wasm, S5 internal/vm,
// and the stand-ins the engine's tests use), so that the engine cannot
// tell them apart by anything the contract does not say.
//
// An executor under test is a Subject: the executor and the programs the
// suite runs on it, each a job of the executor's kind with what it must
// do (write these streams, exit with this code, be refused this). Given
// them, Run checks:
//
//   - identity: a name, a tier of the ladder, a kind it runs;
//   - the probe: available, or unavailable with its reason (the rest of
//     the suite is then skipped with that reason, and only then); an
//     available probe has no failed layer and stays available; the same
//     executor made where it cannot work is unavailable, saying why;
//   - limits: a Limiter's are not negative and hold no deadline;
//   - a job runs: its Result says how it ended (exited, with its code),
//     when, and by which executor; stdin reaches it, stdout and stderr
//     are exactly what it wrote;
//   - a deadline ends it as attest.Deadline; a cancelled context ends it
//     as attest.Killed; for native programs, a context cancelled with
//     executor.ErrBudget ends it as attest.BudgetExhausted;
//   - nothing is left running when Run returns: the job's cgroup holds no
//     process (where the suite can make cgroups: as root);
//   - a refusal: what the grants deny is a decision in the job's
//     Enforcer log, or, where the executor enforces nothing (S0), a
//     grant it cannot honour is refused before anything runs, as bad
//     input;
//   - sessions (a Sessioner): two execs share processes and files; an
//     exec's deadline or cancellation ends the exec, not the session; a
//     refusal in a session is in the exec's log; a Freezer freezes and
//     reads it back, and thaws; a Snapshotter writes an image whose
//     address is its content and continues; a Resumer reopens one with
//     its processes; Close ends everything, and a closed session runs
//     nothing.
//
// The suite starts no goroutine that outlives it and removes what it
// makes (cgroups, directories). It never asserts how long anything
// takes: a run that never ends is found by go test's -timeout.
package executortest
