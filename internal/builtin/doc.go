// Package builtin assembles the executors this program has built in, in
// one place: S2 (WebAssembly on wazero), S1 (a native program confined
// by Linux), S0 (a bare host process, on explicit request), and S5 (a
// QEMU microVM for native programs and for VM images, and Firecracker's
// API). The CLI and the service make their host with Config.Executors;
// the engine (internal/host) imports no backend.
//
// Invariants:
//   - The order is the host's preference within a tier (its first
//     available executor of the unit's kind runs it), and is the same
//     for every caller.
//   - An executor that cannot be made fails the whole assembly, and
//     what was already made is closed; an executor that is made but
//     unavailable on this machine is listed, and its probe says why.
package builtin
