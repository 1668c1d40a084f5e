// Package bare is the S0 executor: a native program as a plain host
// process, for trusted work, only on explicit request (--tier S0).
//
// Invariants:
//   - Nothing confines the program: it reaches whatever the host user
//     can. Its grants are recorded, not enforced, and every run says so
//     in its notes; a grant whose point is a restriction (an exec list,
//     an injected credential, a storage quota) is refused rather than
//     silently ignored.
//   - It is measured as every tier is: the program is stopped at its
//     first instruction, placed in the run's cgroup, and only then runs,
//     so that every process it starts is counted.
//   - Its environment is the unit's only (not the host's), its deadline
//     and cancellation end its whole process group.
package bare
