// Package live keeps what outlives one run: live sandboxes (S1, S2, S5)
// and their durable run records, suspension and resumption, parking and
// the preservation fence, the idle fence, warm pools, seeding, the files
// API, and bundles that carry a durable run to another host.
//
// A Manager holds a host (package host: the engine that plans, runs and
// seals every unit). Every exec in a sandbox is a run the host plans and
// seals; the manager adds the sandbox around it: its workspace, its
// session (an init or a VM that keeps processes between execs), its
// record. The server, the CLI and the MCP tools reach sandboxes only
// through a Manager.
//
// Invariants:
//   - A sandbox's record is appended before anything it records is
//     visible: a Resumed segment before the sandbox answers, a Suspended
//     one before its processes are torn down.
//   - Idle never destroys: a sandbox is parked only through the
//     preservation fence, retained otherwise.
//   - What a sandbox is given is checked, by the host, against who asks
//     for it, when it is made, claimed, resumed or imported, and at
//     each exec and files call.
package live
