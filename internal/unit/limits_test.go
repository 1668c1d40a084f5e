package unit

import (
	"errors"
	"testing"
)

// TestLimitsValidate: every limit no run can have is refused, naming its
// field; zero is unset and passes Validate; CheckLimit takes zero as a
// value stated (a flag's), so that it refuses 0 pids, pages or bytes.
func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     Limits
		field string // "" for none
	}{
		{"none set", Limits{}, ""},
		{"all set", Limits{DeadlineMS: 1, MemoryBytes: MinMemory, Pids: 2, CPUMillis: 1, MemoryPages: MaxMemoryPages, WorkspaceBytes: 1}, ""},
		{"memory below the least", Limits{MemoryBytes: MinMemory - 1}, "memory_bytes"},
		{"memory negative", Limits{MemoryBytes: -1}, "memory_bytes"},
		{"one pid", Limits{Pids: 1}, "pids"},
		{"pids negative", Limits{Pids: -5}, "pids"},
		{"cpu negative", Limits{CPUMillis: -1}, "cpu_millis"},
		{"deadline negative", Limits{DeadlineMS: -1}, "deadline_ms"},
		{"pages over", Limits{MemoryPages: MaxMemoryPages + 1}, "memory_pages"},
		{"pages negative", Limits{MemoryPages: -1}, "memory_pages"},
		{"workspace negative", Limits{WorkspaceBytes: -1}, "workspace_bytes"},
		{"the first wrong one is named", Limits{Pids: 1, MemoryPages: -1}, "pids"},
	} {
		err := tc.l.Validate()
		var le *LimitError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &le) || le.Field != tc.field || le.Why == "" || !le.Invalid()):
			t.Errorf("%s: %v, want a limit error naming %s", tc.name, err, tc.field)
		}
	}
	for _, tc := range []struct {
		field string
		v     int64
		ok    bool
	}{
		{"memory_bytes", 0, false}, {"pids", 0, false}, {"memory_pages", 0, false},
		{"cpu_millis", 0, true}, {"deadline_ms", 0, true}, {"workspace_bytes", 0, true},
		{"pids", 2, true}, {"memory_pages", 1, true}, {"memory_bytes", MinMemory, true},
	} {
		if err := CheckLimit(tc.field, tc.v); (err == nil) != tc.ok {
			t.Errorf("CheckLimit(%s, %d): %v, want ok %v", tc.field, tc.v, err, tc.ok)
		}
	}
	if err := CheckLimit("colour", 1); err == nil {
		t.Error("CheckLimit of a limit that does not exist passed")
	}
}
