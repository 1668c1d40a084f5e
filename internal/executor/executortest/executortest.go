package executortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/tier"
)

// Subject is an executor under test and the programs the suite runs on
// it.
type Subject struct {
	Executor executor.Executor
	// Print copies its stdin to stdout, writes to stderr, and exits:
	// Stdin, Stdout, Stderr and Code say what it is given and must do.
	Print Program
	// Hang runs until it is stopped. Ready, when set, is what it writes
	// to stdout once it runs: it is interrupted only then. Where it is
	// empty (an executor whose runs take long to start: S5) it is
	// interrupted as soon as it is started, and its deadline may pass
	// while it starts.
	Hang Program
	// Deny asks for what its grants do not allow: Denied is the decision
	// its log must then hold, and Code its exit code; or, for an
	// executor that cannot enforce a grant of it, Refused.
	Deny Program
	// Unavailable, when set, makes the same executor where it cannot
	// work (its helper or image missing); Why is part of the reason its
	// probe must give.
	Unavailable func(t *testing.T) (e executor.Executor, why string)
	// Session holds the programs of sessions; it is required exactly
	// when Executor is an executor.Sessioner.
	Session *SessionPrograms
}

// Program is one of the suite's programs on an executor.
type Program struct {
	// Job makes the job that runs it: its unit (kind, entry, arguments,
	// environment), image and grants. The suite gives the job its
	// streams, an Enforcer of its grants, a journal, its deadline and a
	// cgroup, and fills in UnitAddr and ImageAddr where they are zero.
	Job func(t *testing.T) *executor.Job
	// Stdin is what it is given; Stdout and Stderr what it must write
	// (exactly); Code its exit code.
	Stdin, Stdout, Stderr string
	Code                  int
	// Ready is what it writes once it runs (Hang).
	Ready string
	// Denied is the refusal its log must hold (Deny).
	Denied *Denial
	// Refused says the executor refuses the job before it runs (Deny).
	Refused bool
}

// Denial is a refused decision: its kind, and a part of its target.
type Denial struct {
	Kind   grant.Kind
	Target string
}

// SessionPrograms are the programs a Sessioner's sessions are checked
// with. Spec's grants must let Deny's job run.
type SessionPrograms struct {
	// Spec is the session's spec; the suite gives it a cgroup.
	Spec func(t *testing.T) executor.SessionSpec
	// Start leaves a process running in the background and a file in
	// the session (where no grant reaches), and exits 0.
	Start Program
	// Check writes Stdout and exits Code only when Start's process and
	// file are there.
	Check Program
	// Hang runs until it is stopped; Ready is what it writes first.
	Hang Program
	// Deny asks for what the session's grants do not allow (Denied).
	Deny Program
	// Listen, for a session that is an executor.PortDialer, checks its
	// ports; Spec's Listen must name Listen.Port. Nil for others.
	Listen *ListenPrograms
}

// ListenPrograms check that the host reaches a session's listen port
// (executor.PortDialer) as a process inside it would, and no other.
type ListenPrograms struct {
	// Port is one of the session's Listen ports.
	Port int
	// Serve leaves a server on Port running in the background, which
	// writes Greeting to each connection and closes it; it exits 0 once
	// the server listens.
	Serve    Program
	Greeting string
}

// Run runs the suite on s.
func Run(t *testing.T, s Subject) {
	e := s.Executor
	if e == nil {
		t.Fatal("no executor")
	}
	t.Run("identity", func(t *testing.T) {
		if e.Name() == "" {
			t.Error("no name")
		}
		if !e.Tier().Valid() {
			t.Errorf("tier %d is not a rung of the ladder", e.Tier())
		}
		switch e.Kind() {
		case tier.Native, tier.Wasm, tier.VM:
		default:
			t.Errorf("kind %q", e.Kind())
		}
	})
	if s.Unavailable != nil {
		t.Run("unavailable", func(t *testing.T) {
			u, why := s.Unavailable(t)
			for i := range 2 {
				p := u.Probe(context.Background())
				if p.Available || p.Reason == "" || !strings.Contains(p.Reason, why) {
					t.Fatalf("probe %d where it cannot work: %+v, want it unavailable saying %q", i+1, p, why)
				}
			}
		})
	}
	p := e.Probe(context.Background())
	if !p.Available {
		if p.Reason == "" {
			t.Fatalf("%s is unavailable and does not say why", e.Name())
		}
		t.Skipf("%s is unavailable here: %s", e.Name(), p.Reason)
	}
	t.Run("probe", func(t *testing.T) {
		for _, l := range p.Layers {
			if !l.OK {
				t.Errorf("available, yet layer %s failed: %s", l.Name, l.Detail)
			}
		}
		if again := e.Probe(context.Background()); !again.Available {
			t.Errorf("available, then not: %s", again.Reason)
		}
	})
	if l, ok := e.(executor.Limiter); ok {
		t.Run("limits", func(t *testing.T) {
			d := l.DefaultLimits()
			if d.DeadlineMS != 0 {
				t.Errorf("default limits hold a deadline (%d ms): a deadline is the request's", d.DeadlineMS)
			}
			for name, v := range map[string]int64{"memory": d.MemoryBytes, "pids": d.Pids, "cpu": d.CPUMillis, "pages": d.MemoryPages, "workspace": d.WorkspaceBytes} {
				if v < 0 {
					t.Errorf("default %s limit %d", name, v)
				}
			}
			if l.DefaultLimits() != d {
				t.Error("the default limits changed between two calls")
			}
		})
	}
	cg, noGroups := hierarchy()
	t.Run("runs", func(t *testing.T) {
		r := run(t, e.Run, s.Print, runGroups(t, cg), 0, nil)
		r.exited(t, s.Print.Code)
		r.streams(t, s.Print)
		r.nothingLeft(t, noGroups)
	})
	t.Run("deadline", func(t *testing.T) {
		r := run(t, e.Run, s.Hang, runGroups(t, cg), 300*time.Millisecond, nil)
		r.status(t, attest.Deadline)
		r.nothingLeft(t, noGroups)
	})
	t.Run("cancel", func(t *testing.T) {
		r := run(t, e.Run, s.Hang, runGroups(t, cg), 0, context.Canceled)
		r.status(t, attest.Killed)
		r.nothingLeft(t, noGroups)
	})
	if e.Kind() == tier.Native { // the engine stops native runs at their budget; S2's is its fuel
		t.Run("budget", func(t *testing.T) {
			r := run(t, e.Run, s.Hang, runGroups(t, cg), 0, executor.ErrBudget)
			r.status(t, attest.BudgetExhausted)
			r.nothingLeft(t, noGroups)
		})
	}
	t.Run("deny", func(t *testing.T) { deny(t, e.Run, s.Deny, runGroups(t, cg)) })
	sx, isSessioner := e.(executor.Sessioner)
	switch {
	case isSessioner && s.Session == nil:
		t.Error("a Sessioner, yet no session programs to check its sessions with")
	case !isSessioner && s.Session != nil:
		t.Error("session programs for an executor that opens no sessions")
	case isSessioner:
		t.Run("session", func(t *testing.T) { session(t, sx, s.Session, cg, noGroups) })
	}
}

// deny runs a refusal.
func deny(t *testing.T, runf runFunc, p Program, mk groups) {
	t.Helper()
	if p.Refused {
		j := prepare(t, p, nil)
		res, err := runf(context.Background(), j.Job)
		var inv interface{ Invalid() bool }
		if err == nil || res != nil {
			t.Fatalf("not refused: %+v %v", res, err)
		}
		if !errors.As(err, &inv) || !inv.Invalid() {
			t.Fatalf("refused with %v, which is not bad input (an Invalid() error)", err)
		}
		if j.stdout.String() != "" || j.stderr.String() != "" {
			t.Fatalf("a refused job wrote %q %q", j.stdout.String(), j.stderr.String())
		}
		return
	}
	if p.Denied == nil {
		t.Fatal("the Deny program says neither what is denied nor that it is refused")
	}
	r := run(t, runf, p, mk, 0, nil)
	r.exited(t, p.Code)
	r.denied(t, *p.Denied)
}

// runFunc is an executor's Run or a session's.
type runFunc func(context.Context, *executor.Job) (*executor.Result, error)

// ran is a job and what became of it.
type ran struct {
	*prepared
	res *executor.Result
	err error
}

// prepared is a job as the suite gives it to an executor.
type prepared struct {
	Job            *executor.Job
	stdout, stderr *watched
	group          *cgroup.Group
}

// groups makes a job's cgroup: nil, none.
type groups func() *cgroup.Group

// runGroups makes a run's groups in h (none when h is nil), as the engine
// makes them, each ended and removed when t ends.
func runGroups(t *testing.T, h *cgroup.Hierarchy) groups {
	if h == nil {
		return nil
	}
	return func() *cgroup.Group { return group(t, h, "cpuacct", "cpu", "memory", "pids", "freezer") }
}

// prepare makes p's job and gives it what the engine gives one: streams,
// an Enforcer, a journal, addresses, a cgroup of mk's (none when mk is
// nil).
func prepare(t *testing.T, p Program, mk groups) *prepared {
	t.Helper()
	if p.Job == nil {
		t.Fatal("the subject gives no job for this program")
	}
	j := p.Job(t)
	if j.Enforcer == nil {
		j.Enforcer = grant.NewEnforcer(j.Grants)
	}
	if j.Record == nil && j.Replay == nil {
		j.Record = journal.NewWriter(&bytes.Buffer{})
	}
	if j.ImageAddr.IsZero() && j.Image != nil {
		j.ImageAddr = addr.Of(j.Image)
	}
	if j.Unit.Image.IsZero() {
		j.Unit.Image = j.ImageAddr
	}
	if j.UnitAddr.IsZero() {
		if _, ua, err := j.Unit.Canonical(); err == nil {
			j.UnitAddr = ua
		}
	}
	pr := &prepared{Job: j, stdout: &watched{ready: p.Ready}, stderr: &watched{}}
	pr.stdout.init()
	j.Stdout, j.Stderr = pr.stdout, pr.stderr
	j.Stdin = strings.NewReader(p.Stdin)
	if mk != nil {
		pr.group = mk()
		j.Cgroup = pr.group
	}
	return pr
}

// run runs p with runf, in a cgroup of mk's, under deadline d (0: none); stop, when set,
// cancels the run's context with that cause once it is Ready (or at once,
// for a program that says nothing when ready).
func run(t *testing.T, runf runFunc, p Program, mk groups, d time.Duration, stop error) *ran {
	t.Helper()
	pr := prepare(t, p, mk)
	pr.Job.Deadline = d
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type answer struct {
		res *executor.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := runf(ctx, pr.Job)
		done <- answer{res, err}
	}()
	var a answer
	if stop != nil {
		if p.Ready != "" {
			select {
			case <-pr.stdout.readyC:
			case a = <-done:
				t.Fatalf("it ended before it said %q: %+v %v (stdout %q stderr %q)", p.Ready, a.res, a.err, pr.stdout.String(), pr.stderr.String())
			}
		}
		cancel(stop)
	}
	a = <-done
	if a.err == nil && a.res == nil {
		t.Fatal("Run returned neither a result nor an error")
	}
	return &ran{prepared: pr, res: a.res, err: a.err}
}

// status checks that the run ended as want.
func (r *ran) status(t *testing.T, want attest.Status) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("want a run that ended %s; Run failed: %v", want, r.err)
	}
	if r.res.Outcome.Status != want {
		t.Fatalf("outcome %+v, want %s (stdout %q stderr %q)", r.res.Outcome, want, r.stdout.String(), r.stderr.String())
	}
	if r.res.Executor == "" {
		t.Error("the result does not name its executor")
	}
	if r.res.Start.IsZero() || r.res.End.Before(r.res.Start) {
		t.Errorf("start %v, end %v", r.res.Start, r.res.End)
	}
}

// exited checks that the run exited with code.
func (r *ran) exited(t *testing.T, code int) {
	t.Helper()
	r.status(t, attest.Exited)
	if c := r.res.Outcome.ExitCode; c == nil || *c != code {
		t.Fatalf("exit code %v, want %d (stdout %q stderr %q)", c, code, r.stdout.String(), r.stderr.String())
	}
}

// streams checks what the run wrote.
func (r *ran) streams(t *testing.T, p Program) {
	t.Helper()
	if got := r.stdout.String(); got != p.Stdout {
		t.Errorf("stdout %q, want %q", got, p.Stdout)
	}
	if got := r.stderr.String(); got != p.Stderr {
		t.Errorf("stderr %q, want %q (an executor's remarks go to Result.Notes, never into what the program wrote)", got, p.Stderr)
	}
}

// denied checks that the job's log holds the refusal d.
func (r *ran) denied(t *testing.T, d Denial) {
	t.Helper()
	log := r.Job.Enforcer.Log()
	for _, x := range log.Decisions {
		if !x.Allow && x.Kind == d.Kind && strings.Contains(x.Target, d.Target) {
			return
		}
	}
	var b strings.Builder
	for _, x := range log.Decisions {
		b.WriteString(x.String() + "\n")
	}
	t.Fatalf("no refused %s decision on %q in the log:\n%s(stdout %q stderr %q)", d.Kind, d.Target, b.String(), r.stdout.String(), r.stderr.String())
}

// nothingLeft checks that nothing of the run runs any more: its cgroup
// holds no process (and is removed).
func (r *ran) nothingLeft(t *testing.T, why string) {
	t.Helper()
	if r.group == nil {
		t.Logf("not checked that nothing is left running: %s", why)
		return
	}
	if err := r.group.Remove(); err != nil {
		t.Errorf("Run returned while a process of the job still runs (its cgroup cannot be removed: %v)", err)
	}
}

// hierarchy is the machine's cgroup hierarchy, where the suite can make
// groups in it (as root), or why not.
func hierarchy() (*cgroup.Hierarchy, string) {
	if os.Geteuid() != 0 {
		return nil, "the suite makes cgroups only as root"
	}
	h, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		return nil, err.Error()
	}
	return h, ""
}

// group makes a cgroup for the test, ended and removed when it ends.
func group(t *testing.T, h *cgroup.Hierarchy, ctls ...string) *cgroup.Group {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	g, err := h.Create("executortest-"+hex.EncodeToString(b[:]), ctls...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.Kill(10 * time.Second)
		g.Remove()
	})
	return g
}

// watched is a stream the suite reads, which says when Ready was written.
type watched struct {
	mu     sync.Mutex
	b      bytes.Buffer
	ready  string
	readyC chan struct{}
	seen   bool
}

func (w *watched) init() { w.readyC = make(chan struct{}) }

func (w *watched) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.ready != "" && !w.seen && strings.Contains(w.b.String(), w.ready) {
		w.seen = true
		close(w.readyC)
	}
	return len(p), nil
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// image is a path for a session's image in a directory of the test's.
func image(t *testing.T) string { return filepath.Join(t.TempDir(), "image") }
