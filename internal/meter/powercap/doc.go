// Package powercap reads CPU package energy from Linux's powercap sysfs
// (RAPL, on Intel and on AMD since Zen), as a meter.Source.
//
// Rules (docs/meter.md; the research note's pitfalls):
//
//   - Zones are found under <sysfs>/class/powercap and known by their
//     "name" file, never by their index, which is hexadecimal and is not the
//     socket ("intel-rapl:a" is the eleventh zone).
//   - Package zones ("package-N", "package-N-die-M") are summed; "dram" is
//     reported on its own line; "psys" is never added to package; core and
//     uncore are inside package and are skipped.
//   - The same package seen through several drivers (intel-rapl,
//     intel-rapl-mmio, intel-rapl-tpmi) is counted once, the intel-rapl
//     copy preferred. Zones of one package that advance by identical
//     deltas across the liveness probe (AMD's per-die mirrors of one
//     package counter) are counted once.
//   - Each zone wraps at its own max_energy_range_uj; deltas are taken per
//     zone, then summed. A failed read is an error, never zero.
//   - energy_uj is root-only on current kernels: a zone that exists but
//     cannot be read makes the source Unreadable, with the reason.
//
// The sysfs root is a parameter; operators can point the host at another
// root with SANDBOX_SYSFS_ROOT, and tests use fake trees.
package powercap
