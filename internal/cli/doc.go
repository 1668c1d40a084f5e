// Package cli is the sandbox command line as its users see it: the
// commands, grouped as `sandbox --help` lists them, their flags and
// help, and every command that talks to a running service (run through
// one, exec, cp, ls, ps, rm, create, suspend, resume, close, seed,
// pools, records through one) or needs nothing of the engine (version,
// grants, key, hash, help, completion).
//
// It links no engine: not internal/host, the executors, the WASM
// runtime, SQLite or the MCP SDK, so that the thin `sandbox` program
// starts like a small one (Go initialises every package a program
// links before main). The commands that run the engine in this process
// (run --local, serve, doctor, verify, gc, mcp, image, fleet, ...) are
// package engine's, linked only into `sandbox-engine`; the thin program
// lists them as stubs and executes sandbox-engine, found beside it, in
// its place (the same arguments, the same process id, its streams and
// signals), or says how to build it when it is not there.
//
// Invariants:
//
//   - Every command is listed in one group of `sandbox --help`, in the
//     thin program and in sandbox-engine alike; a stub's name, group and
//     summary are its full command's (tested).
//   - The thin program makes only the command it runs, with its
//     subcommands, and the whole tree only for help, completion, or a
//     name that is no command's; a command's help, output, messages and
//     exit status are the same in either tree (tested).
//   - Flags are checked by the code the API checks with:
//     unit.CheckLimit for limits, grant.Input for grants.
//   - A command's output, messages and exit status are the same in both
//     programs: the service's path runs the same code in each, and a
//     stub's command runs only in sandbox-engine.
package cli
