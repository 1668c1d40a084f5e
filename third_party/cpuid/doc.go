// Package cpuid stands in for github.com/klauspost/cpuid/v2 in this
// module's builds (go.mod replaces it): the two answers
// github.com/zeebo/blake3, its only user here, asks for, from
// golang.org/x/sys/cpu.
//
// Why: klauspost/cpuid detects everything it knows at start, before main
// (some forty CPUID instructions, each a VM exit under a hypervisor:
// 0.2 ms of `sandbox version`'s 2.6 ms, docs/cli.md "Start-up"), for a
// program that asks it two questions. golang.org/x/sys/cpu asks five.
//
// Invariants:
//
//   - It answers as klauspost/cpuid v2.0.12 does: AVX2 is CPUID.(7,0):EBX
//     bit 5 where AVX is usable (CPUID.1:ECX AVX and OSXSAVE, and XCR0
//     enables the SSE and AVX state); SSE4 is SSE4.1, CPUID.1:ECX bit 19.
//     Off x86, neither. The answers choose BLAKE3's implementation (AVX2,
//     SSE4.1 or plain Go), never its output: every hash is the same.
//   - It has only what this module's dependencies use; a dependency that
//     uses more of klauspost/cpuid fails to build, not to run.
//   - Like golang.org/x/sys/cpu, GODEBUG=cpu.avx2=off (and the like)
//     turns a feature off.
package cpuid
