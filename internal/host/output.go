package host

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/opensubstrate/sandbox/internal/job"
)

// ErrOutputClosed is the cause a run is stopped with when the reader of
// its standard output went away (sandbox run … | head -1).
var ErrOutputClosed = errors.New("the reader of the run's output went away")

// tee carries one of the guest's streams to the caller and into the
// record. The caller comes first and the guest never sees an error:
// a record that cannot be written (a full disk) is noted, the run goes
// on, and it is not sealed; a caller that went away (a closed pipe) is
// written to no more, and gone is called.
type tee struct {
	caller io.Writer
	record io.Writer
	hash   io.Writer
	gone   func() // the caller went away; nil: nothing to do

	mu        sync.Mutex
	callerErr error
	recordErr error
	muted     bool // the caller is not written to (a continuation's parked part)
}

// mute stops (or resumes) writing to the caller.
func (t *tee) mute(on bool) {
	t.mu.Lock()
	t.muted = on
	t.mu.Unlock()
}

func (t *tee) Write(p []byte) (int, error) {
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
	if t.recordErr == nil {
		if _, err := t.record.Write(p); err != nil {
			t.recordErr = err
		}
	}
	return len(p), nil
}

// failed returns the error the record met, if any.
func (t *tee) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.recordErr
}

// NotSealedError is a run that ran, and ended, but whose records could
// not be kept (a full disk, a failed write): it is not sealed, and
// nothing of it is stored. The guest's own streams reached the caller
// whole; Result says how the guest ended.
type NotSealedError struct {
	Result *job.Result
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
