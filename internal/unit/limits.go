package unit

import "fmt"

// MinMemory is the least memory limit a native run can start with: its
// init (a Go program) and the program need this much to run at all.
const MinMemory = 16 << 20

// MaxMemoryPages is the most 64 KiB pages a WebAssembly memory can have.
const MaxMemoryPages = 65536

// LimitError is a limit no run can have. Field names it as the unit's
// JSON does (memory_bytes); Why says what it wants. The caller names it
// to its own user: the API as a field, the command line as a flag.
type LimitError struct {
	Field string
	Why   string
}

func (e *LimitError) Error() string { return "limits." + e.Field + ": " + e.Why }

// Invalid: the limit is refused as given.
func (*LimitError) Invalid() bool { return true }

// limitRules are the limits a run can have, one check each, in the
// order they are checked.
var limitRules = []struct {
	field string
	get   func(Limits) int64
	ok    func(int64) bool
	why   string
}{
	{"memory_bytes", func(l Limits) int64 { return l.MemoryBytes }, func(v int64) bool { return v >= MinMemory },
		fmt.Sprintf("below %d MiB, the least a native run (its init and its program) needs", MinMemory>>20)},
	{"pids", func(l Limits) int64 { return l.Pids }, func(v int64) bool { return v >= 2 },
		"want at least 2 (the run's init and its program)"},
	{"cpu_millis", func(l Limits) int64 { return l.CPUMillis }, func(v int64) bool { return v >= 0 },
		"want a number of CPUs above zero, or 0 for no limit"},
	{"deadline_ms", func(l Limits) int64 { return l.DeadlineMS }, func(v int64) bool { return v >= 0 },
		"want a duration, or 0 for none"},
	{"memory_pages", func(l Limits) int64 { return l.MemoryPages }, func(v int64) bool { return v >= 1 && v <= MaxMemoryPages },
		fmt.Sprintf("want 1 to %d pages of 64 KiB", MaxMemoryPages)},
	{"workspace_bytes", func(l Limits) int64 { return l.WorkspaceBytes }, func(v int64) bool { return v >= 0 },
		"want a size, or 0 for none"},
}

// Validate refuses limits no run can have, naming the first field that
// is wrong (a *LimitError). A zero field is not set: the executor's own
// limit applies, and it passes.
func (l Limits) Validate() error {
	for _, r := range limitRules {
		if v := r.get(l); v != 0 && !r.ok(v) {
			return &LimitError{Field: r.field, Why: r.why}
		}
	}
	return nil
}

// CheckLimit checks one limit as given, zero included: a value someone
// stated, as a flag states one (--pids 0 is a limit no run can have;
// --cpus 0 and --deadline 0 are none). field is the limit's JSON name.
// The rules are Validate's.
func CheckLimit(field string, v int64) error {
	for _, r := range limitRules {
		if r.field != field {
			continue
		}
		if !r.ok(v) {
			return &LimitError{Field: r.field, Why: r.why}
		}
		return nil
	}
	return fmt.Errorf("unit: no limit %q", field)
}
