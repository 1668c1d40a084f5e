// Package fuel makes a WebAssembly module count its own execution, so that
// a run's work is metered deterministically: the same module with the same
// inputs always consumes the same fuel, on any host.
//
// Instrument rewrites a module before it is compiled. It appends one
// mutable i64 global, exports it as "__sandbox_fuel", and inserts at the
// start of every metered block (function entry, loop header, both arms of
// an if, after every block end) code that subtracts the block's cost from
// the global. At function entries and loop headers it also checks: when the
// fuel is below zero the code executes unreachable, which traps. The host
// sets the global to the budget before running and reads it after; a trap
// with the global below zero means the budget ran out. A second exported
// global, "__sandbox_oom", is set to 1 whenever memory.grow is refused.
//
// The cost model (model "wasm-fuel/1"): one unit per instruction, charged
// per metered block on entry (a block left early by a branch or a trap is
// still charged whole); HostCallCost more per call of an imported (host)
// function; and one unit per 64 bytes for memory.copy and memory.fill,
// charged before the operation from its length operand. Every opcode of
// WebAssembly 2.0 is understood, including the 0xFC (saturating truncation,
// bulk memory, table) and 0xFD (SIMD) prefixes; anything else (tail calls,
// exceptions, threads, relaxed SIMD) is refused with its offset, never
// passed through uncounted.
package fuel
