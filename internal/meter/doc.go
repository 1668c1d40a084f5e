// Package meter measures the energy of runs, per device class, and never
// calls an estimate a measurement.
//
// A Source is one hardware energy counter (powercap for the CPU, NVML for
// GPUs), read as cumulative microjoules per rail. A Source is used for
// readings only while it is live, by the rule of the project's seed:
// every rail summed into one figure must advance in at least 5 sample
// intervals, in at least 4 of every 5, over at least 300 ms, while the
// meter burns CPU; the check runs once per process and is cached (Status).
// A span across which the CPU counter did not advance is never a reading.
//
// A Span brackets one run. On Stop, for each class the run used:
//
//   - with a live counter: a host-scope HwShunt reading of the whole
//     counter's delta, and a run-scope ModelBased reading of the run's
//     share, E_run = ΔE × cpu_run / (n_cpu × wall), with the formula and
//     its inputs in the basis; for a device class the host gives to one
//     run at a time (Meter.Exclusive, Span.Hold), the run-scope reading is
//     the counter's whole delta, HwShunt: the run's own measurement;
//   - otherwise: a run-scope Estimator reading, cpu_run × TDP / n_cpu
//     (or wall × TDP / n_cpu where the run's CPU time is unknown), with
//     the TDP's origin and the reason no counter was used in the basis.
//
// Counters are differenced per rail (wrapping with each zone's own
// max_energy_range_uj) and only then summed; a failed read is an error,
// never zero; a counter that goes down without a range to wrap in (NVML)
// is a reset, and the span falls back to the Estimator, saying so. While a
// span is open a background sampler reads the counters every Interval, so
// a long span sees every wrap.
package meter
