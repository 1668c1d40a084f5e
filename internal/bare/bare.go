package bare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"sort"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/tier"
)

// Note is what every S0 run's attestation says of it.
const Note = "S0: a bare host process for trusted work, run on explicit request; nothing confined it, and its grants were recorded, not enforced"

// ErrNotSupported: S0 is built for Linux only, where its runs are
// placed in cgroups and measured as every tier's.
var ErrNotSupported = errors.New("bare: S0 runs on Linux only")

// KillGrace is how long an interrupted program has to end before it is
// killed.
const KillGrace = 2 * time.Second

// Executor runs native programs at S0.
type Executor struct{}

// Executor is an executor, with no capability beyond running a job.
var _ executor.Executor = Executor{}

// Name is "bare".
func (Executor) Name() string { return "bare" }

// Tier is S0.
func (Executor) Tier() tier.Tier { return tier.S0 }

// Kind is native.
func (Executor) Kind() tier.Kind { return tier.Native }

// Probe: S0 promises no confinement, so there is nothing to prove; it is
// available wherever a process can be started.
func (Executor) Probe(context.Context) tier.Probe {
	if runtime.GOOS != "linux" {
		return tier.Probe{Reason: ErrNotSupported.Error()}
	}
	return tier.Probe{Available: true, Reason: "a plain host process: no confinement to prove (chosen only on explicit request)"}
}

// RefusedError is a grant S0 cannot honour: it restricts, and nothing
// here restricts.
type RefusedError struct{ What string }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("S0 confines nothing, so it cannot honour %s: run it at S1, which enforces it", e.What)
}

// Invalid: the request cannot run at S0 as given.
func (e *RefusedError) Invalid() bool { return true }

// check refuses the grants whose only point is a restriction.
func check(j *executor.Job) error {
	g := j.Grants
	switch {
	case len(g.Exec.Allow) > 0 || len(g.Exec.Deny) > 0:
		return &RefusedError{"an exec list"}
	case g.Kernel || g.Confidential || g.Locality != "":
		return &RefusedError{"a kernel, confidential or locality grant"}
	case j.RootDir != "" || !j.Unit.Root.IsZero():
		return &RefusedError{"an image's root filesystem (S0 runs in the host's own)"}
	}
	for _, n := range g.Net {
		if len(n.Inject) > 0 {
			return &RefusedError{"an injected credential (it is added by the egress proxy, which S0 has not)"}
		}
	}
	for _, s := range g.Storage {
		if s.Quota > 0 {
			return &RefusedError{"a storage quota"}
		}
	}
	return nil
}

// Run runs the unit's program as a host process.
func (e Executor) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if err := check(j); err != nil {
		return nil, err
	}
	res := &executor.Result{Executor: e.Name(), Notes: []string{Note}}
	u := j.Unit
	args := u.Args
	if len(args) == 0 {
		args = []string{u.Entry}
	}
	env := make([]string, 0, len(u.Env))
	for k, v := range u.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd := &exec.Cmd{Path: u.Entry, Args: args, Env: env, Dir: u.Dir, Stdin: j.Stdin, Stdout: orDiscard(j.Stdout), Stderr: orDiscard(j.Stderr)}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	res.Start = time.Now()
	if err := start(cmd, j); err != nil {
		res.End = time.Now()
		res.ExecErrno = errnoOf(err) // 127 for a missing program, 126 for one that cannot run
		res.Outcome = attest.Outcome{Status: attest.Failed, Detail: err.Error()}
		return res, nil
	}
	if j.OnStart != nil {
		j.OnStart(executor.Control{})
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if j.Deadline > 0 {
		t := time.NewTimer(j.Deadline)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	var how string
	select {
	case err = <-done:
	case <-timeout:
		how = "deadline"
		killGroup(cmd)
		err = <-done
	case <-ctx.Done():
		how = "canceled"
		if errors.Is(context.Cause(ctx), executor.ErrBudget) {
			how = "budget"
			killGroup(cmd)
			err = <-done
			break
		}
		interruptGroup(cmd)
		select {
		case err = <-done:
		case <-time.After(KillGrace):
			killGroup(cmd)
			err = <-done
		}
	}
	if how != "" {
		// A run that was ended leaves nothing running: what its program
		// left (a background job ignores an interrupt) ends with it.
		killGroup(cmd)
		if j.Cgroup != nil {
			j.Cgroup.Kill(cgroup.EmptyWait)
		}
	}
	res.End = time.Now()
	res.Outcome, res.Signal = outcome(cmd, err, how)
	return res, nil
}

// errnoOf is the errno a failed start carries (0: none).
func errnoOf(err error) syscall.Errno {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return 0
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
