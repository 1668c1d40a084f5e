package host

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// ReplayReport says whether a re-execution matched the record.
type ReplayReport struct {
	Run     addr.Addr
	Root    addr.Addr // the replay's journal root
	Entries int
	Diffs   []string // empty when everything matched
}

// Matches reports whether the replay reproduced the run exactly.
func (r *ReplayReport) Matches() bool { return len(r.Diffs) == 0 }

// Replay re-executes the run in dir from its journal, without touching the
// host's files, clock or randomness, and compares stdout, stderr, exit
// status, fuel, decision log and journal root with the record. The records
// it starts from must be intact: a journal whose root is not the one the
// attestation binds is refused before anything runs.
func (h *Host) Replay(ctx context.Context, dir string, stdout, stderr io.Writer) (*ReplayReport, error) {
	a, err := OpenRun(dir)
	if err != nil {
		return nil, err
	}
	c := a.Claim
	if ub, err := os.ReadFile(filepath.Join(dir, verify.FileUnit)); err == nil {
		if u, err := unit.Decode(ub); err == nil && u.Kind == tier.Native {
			return nil, notReplayable("run %s is a native (S1) run, and S1 runs are not replayable: a native program's inputs are not brokered, so its journal records only its outcome", a.Addr)
		}
	}
	if c.Journal == nil {
		return nil, notReplayable("run %s has no replay journal", a.Addr)
	}
	switch c.Outcome.Status {
	case attest.Deadline, attest.Killed:
		return nil, notReplayable("run %s was cut short (%s) by the wall clock or the caller: where it stopped is not a function of its inputs, so it cannot be replayed exactly; runs that ended on their own (exited, trapped, out-of-fuel, out-of-memory) can", a.Addr, c.Outcome.Status)
	}
	read := func(name string, want addr.Addr) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, Damaged(dir, name, err)
		}
		if got := addr.Of(b); got != want {
			return nil, Damaged(dir, name, reject.New(reject.Address, name, "hashes to %s, the attestation binds %s", got, want))
		}
		return b, nil
	}
	ub, err := read(verify.FileUnit, c.Unit)
	if err != nil {
		return nil, err
	}
	u, err := unit.Decode(ub)
	if err != nil {
		return nil, err
	}
	gb, err := read(verify.FileGrants, c.Grants)
	if err != nil {
		return nil, err
	}
	g, err := grant.Decode(gb)
	if err != nil {
		return nil, err
	}
	jb, err := os.ReadFile(filepath.Join(dir, verify.FileJournal))
	if err != nil {
		return nil, Damaged(dir, verify.FileJournal, err)
	}
	entries, root, err := journal.Parse(jb)
	if err != nil {
		return nil, Damaged(dir, verify.FileJournal, err)
	}
	if root != *c.Journal {
		return nil, Damaged(dir, verify.FileJournal, reject.New(reject.Address, verify.FileJournal, "the journal's root is %s, the attestation binds %s: it was changed after sealing", root, *c.Journal))
	}
	image, err := h.Store.Blob(u.Image)
	if err != nil {
		return nil, fmt.Errorf("run %s cannot be replayed: its module %s is not in this state directory's blob store: %w", a.Addr, u.Image, err)
	}
	ex, err := h.executor(ctx, c.Tier.Chosen, u.Kind)
	if err != nil {
		return nil, err
	}
	rd := journal.NewReader(entries)
	outH, errH := newOutput(), newOutput()
	enf := grant.NewEnforcer(g)
	rep := &ReplayReport{Run: a.Addr, Entries: len(entries)}
	logCompute(enf, u)
	res, runErr := ex.Run(ctx, &executor.Job{
		// The unit carries the limits the run had: they are applied, not
		// this host's defaults.
		Deadline: time.Duration(u.Limits.DeadlineMS) * time.Millisecond,
		Unit:     u, UnitAddr: c.Unit, Image: image, ImageAddr: u.Image, Grants: g, Enforcer: enf, Replay: rd,
		Stdout: io.MultiWriter(orDiscard(stdout), outH), Stderr: io.MultiWriter(orDiscard(stderr), errH),
	})
	if runErr != nil {
		rep.Diffs = append(rep.Diffs, runErr.Error())
		rep.Root = rd.Root()
		return rep, nil
	}
	logSpent(enf, res, g, device.CPU)
	var want journal.Outcome
	if err := rd.Next(journal.OutcomeKind, nil, &want); err != nil {
		rep.Diffs = append(rep.Diffs, err.Error())
	} else {
		got := outcomeOf(res, outH, errH, nil, nil)
		if got.Stdout != want.Stdout {
			rep.Diffs = append(rep.Diffs, fmt.Sprintf("stdout differs: the run wrote %s, the replay %s", want.Stdout, got.Stdout))
		}
		if got.Stderr != want.Stderr {
			rep.Diffs = append(rep.Diffs, fmt.Sprintf("stderr differs: the run wrote %s, the replay %s", want.Stderr, got.Stderr))
		}
		if got.Status != want.Status || got.ExitCode != want.ExitCode {
			rep.Diffs = append(rep.Diffs, fmt.Sprintf("outcome differs: the run %s (exit %d), the replay %s (exit %d)", want.Status, want.ExitCode, got.Status, got.ExitCode))
		}
		for _, f := range []struct {
			name string
			addr addr.Addr
			n    uint64
			kept *journal.Kept
		}{{verify.FileStdout, want.Stdout, want.StdoutLen, want.StdoutKept}, {verify.FileStderr, want.Stderr, want.StderrLen, want.StderrKept}} {
			if f.kept != nil { // the file holds the prefix kept
				f.addr, f.n = f.kept.Addr, f.kept.Len
			}
			b, err := os.ReadFile(filepath.Join(dir, f.name))
			if err == nil && (uint64(len(b)) != f.n || addr.Of(b) != f.addr) {
				err = fmt.Errorf("it is %d bytes hashing to %s, the run wrote %d bytes hashing to %s", len(b), addr.Of(b), f.n, f.addr)
			}
			if err != nil {
				rep.Diffs = append(rep.Diffs, fmt.Sprintf("%s in the run directory is not what the run wrote: %v", f.name, err))
			}
		}
		if got.Fuel != want.Fuel {
			rep.Diffs = append(rep.Diffs, fmt.Sprintf("fuel differs: the run used %d, the replay %d", want.Fuel, got.Fuel))
		}
	}
	if n := rd.Remaining(); n > 0 {
		rep.Diffs = append(rep.Diffs, fmt.Sprintf("the replay ended with %d journal entries unused", n))
	}
	rep.Root = rd.Root()
	if rep.Root != *c.Journal {
		rep.Diffs = append(rep.Diffs, fmt.Sprintf("journal root differs: the run %s, the replay %s", *c.Journal, rep.Root))
	}
	if _, da, err := enf.Log().Canonical(); err == nil && da != c.Decisions {
		rep.Diffs = append(rep.Diffs, fmt.Sprintf("decision log differs: the run %s, the replay %s", c.Decisions, da))
	}
	return rep, nil
}

// replayError is a run that cannot be replayed by its nature (not a
// failure of the replay): the command's exit status says unavailable.
type replayError struct{ msg string }

func (e replayError) Error() string     { return e.msg }
func (e replayError) Unavailable() bool { return true }

func notReplayable(format string, a ...any) error {
	return replayError{fmt.Sprintf(format, a...)}
}
