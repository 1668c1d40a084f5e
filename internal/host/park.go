package host

import (
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/verify"
)

// Continuation is a planned run that continues a parked one (an S2
// exec a suspension parked): the journal of its parked part, replayed,
// and the executor's park.
type Continuation struct {
	Parked    *executor.Parked
	Entries   []journal.Entry
	Remap     map[string]string
	Unit      addr.Addr // the unit it must run as
	Workspace string    // the workspace as the unit names it
}

// ParkedRun is Execute's answer for a run that parked: it is not
// sealed; the caller keeps what it needs to continue it.
type ParkedRun struct {
	Plan    *Plan
	Parked  *executor.Parked
	Journal []byte // the parked part's journal
}

func (e *ParkedRun) Error() string { return "the run parked" }

// partialJournal is what a parked run's journal file holds.
func partialJournal(dir string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, verify.FileJournal))
}
