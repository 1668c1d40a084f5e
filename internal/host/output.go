package host

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/journal"
)

// ErrOutputClosed is the cause a run is stopped with when the reader of
// its standard output went away (sandbox run … | head -1).
var ErrOutputClosed = errors.New("the reader of the run's output went away")

// DefaultOutputMax is how many bytes of each of a run's streams its
// record keeps (stdout.log, stderr.log), by default: the caller receives
// the whole stream, and the journal's outcome the whole stream's length
// and BLAKE3 beside the length and BLAKE3 of the prefix kept.
const DefaultOutputMax = 64 << 20

// outputMax is the bound on each stored stream (Host.OutputMax).
func (h *Host) outputMax() int64 {
	if h.OutputMax > 0 {
		return h.OutputMax
	}
	return DefaultOutputMax
}

// splitter carries one of the guest's streams to the caller and into the
// record. The caller comes first and the guest never sees an error:
// a record that cannot be written (a full disk) is noted, the run goes
// on, and it is not sealed; a caller that went away (a closed pipe) is
// written to no more, and gone is called. The record takes the first
// limit bytes (kept hashes them); hash takes all.
type splitter struct {
	caller io.Writer
	record io.Writer
	hash   io.Writer
	kept   *output // the prefix the record holds
	limit  int64
	gone   func() // the caller went away; nil: nothing to do

	mu        sync.Mutex
	callerErr error
	recordErr error
	muted     bool // the caller is not written to (a continuation's parked part)
}

// mute stops (or resumes) writing to the caller.
func (t *splitter) mute(on bool) {
	t.mu.Lock()
	t.muted = on
	t.mu.Unlock()
}

func (t *splitter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.callerErr == nil && !t.muted {
		if _, err := t.caller.Write(p); err != nil {
			t.callerErr = err
			if t.gone != nil {
				t.gone()
			}
		}
	}
	t.hash.Write(p) // hashing cannot fail: the outcome says what the guest wrote
	keep := p
	if room := t.limit - int64(t.kept.n); int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
	}
	if t.recordErr == nil && len(keep) > 0 {
		if _, err := t.record.Write(keep); err != nil {
			t.recordErr = err
		}
		t.kept.Write(keep)
	}
	return len(p), nil
}

// keptOf is what a stream's record keeps of it: nil where it is whole.
func keptOf(all, kept *output) *journal.Kept {
	if kept == nil || kept.n == all.n {
		return nil
	}
	return &journal.Kept{Len: kept.n, Addr: kept.Sum()}
}

// cutNotes say, for the attestation and the caller, what of each stream
// its record dropped.
func cutNotes(o journal.Outcome, limit int64) []string {
	var notes []string
	for _, s := range []struct {
		name string
		kept *journal.Kept
		n    uint64
		all  addr.Addr
	}{{FileStdout, o.StdoutKept, o.StdoutLen, o.Stdout}, {FileStderr, o.StderrKept, o.StderrLen, o.Stderr}} {
		if s.kept != nil {
			notes = append(notes, fmt.Sprintf("%s keeps the first %d of the %d bytes the run wrote (this host's output bound, %d bytes); %d were dropped from the record, not from the caller; the whole stream's BLAKE3 is %s, the kept prefix's %s",
				s.name, s.kept.Len, s.n, limit, s.n-s.kept.Len, s.all, s.kept.Addr))
		}
	}
	return notes
}

// failed returns the error the record met, if any.
func (t *splitter) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.recordErr
}

// NotSealedError is a run that ran, and ended, but whose records could
// not be kept (a full disk, a failed write): it is not sealed, and
// nothing of it is stored. The guest's own streams reached the caller
// whole; Result says how the guest ended.
type NotSealedError struct {
	Result *executor.Result
	Err    error
}

func (e *NotSealedError) Error() string {
	how := "ran"
	if e.Result != nil {
		how = "ended " + string(e.Result.Outcome.Status)
		if c := e.Result.Outcome.ExitCode; c != nil {
			how += fmt.Sprintf(" %d", *c)
		}
	}
	return fmt.Sprintf("the run %s but was not sealed: no record of it was kept: %v", how, e.Err)
}

func (e *NotSealedError) Unwrap() error { return e.Err }
