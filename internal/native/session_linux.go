//go:build linux

package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/drain"
	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/internal/unit"
)

// ErrSessionEnded is wrapped when an exec comes to a live sandbox whose
// init has ended.
var ErrSessionEnded = errors.New("the sandbox's init has ended")

// Session is a live S1 sandbox: one confined init, built once with the
// sandbox's grants, that each exec joins. A process an exec starts in the
// background keeps running (and keeps its share of the sandbox's limits)
// until the sandbox ends. Each exec's processes are born in a cgroup of
// the exec's own for the CPU controller (cgroup v1), so its receipt is
// its own; memory and process limits are the sandbox's.
type Session struct {
	e       *Executor
	p       *initProc
	sp      *s1init.Spec
	cg      *cgroup.Group
	sendMu  sync.Mutex
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan s1init.SessionMsg
	done    chan struct{} // closed when init's session socket closes
	ctlDone chan struct{} // closed when the control socket's server ends
	sessFD  int           // the host's end of the session socket
	ctlFD   int
	// fdsClosed (under sendMu) says the sockets are closed.
	fdsClosed bool
	// With net grants: the sandbox's egress proxy and the log its
	// decisions go to; env is what every exec's environment gets (the
	// proxy's settings).
	proxy        *egress.Proxy
	proxyCleanup func()
	enf          *grant.Enforcer
	// netns is the sandbox's network namespace, held from its start to
	// Close (DialPort).
	netns    *os.File
	env      []string
	release  func()
	kept     func(*s1init.Status)
	closeErr error
	closed   bool
	notes    []string
}

// Open starts a live sandbox with the grants' storage, under the limits,
// in cg (nil: none, limits not enforced). Net grants are served by one
// egress proxy for the sandbox; exec grants are not yet served to live
// sandboxes: they are refused.
//
// listen are TCP ports its processes may listen on (and connect to)
// inside its own network namespace, which has only loopback: an agent's
// dev server, say. Nothing outside the sandbox reaches them.
//
// root is the host directory of the image root filesystem its programs
// run in; "" for the host's system directories.
func (e *Executor) Open(ctx context.Context, g grant.Set, l unit.Limits, cg *cgroup.Group, listen []int, root string) (*Session, error) {
	if len(g.Exec.Allow) > 0 || len(g.Exec.Deny) > 0 {
		return nil, fmt.Errorf("%w: a live S1 sandbox does not serve exec grants yet (exec control is per run): use sandbox run", errNotYet)
	}
	sp, err := e.spec(g.Storage, root)
	if err != nil {
		return nil, err
	}
	sp.Session = true
	for _, p := range listen {
		if p < 1 || p > 65535 {
			return nil, &invalidError{fmt.Sprintf("listen port %d: want 1 to 65535", p)}
		}
	}
	if len(listen) > 0 && s1init.ABI() < 4 {
		return nil, fmt.Errorf("%w: listen ports need Landlock network rules (ABI 4); this kernel has ABI %d", errNotYet, s1init.ABI())
	}
	sp.Exec.ListenPorts = listen
	s := &Session{e: e, sp: sp, cg: cg, waiting: map[uint64]chan s1init.SessionMsg{}, done: make(chan struct{}), proxyCleanup: func() {}}
	opened := false
	defer func() {
		if !opened {
			s.proxyCleanup()
		}
	}()
	if len(g.Net) > 0 {
		// One egress proxy for the sandbox, its decisions in a log of
		// the sandbox's, from which each exec takes those made while it
		// ran (Run).
		s.enf = grant.NewEnforcer(g)
		proxy, cleanup, err := e.egress(g, s.enf, sp)
		if err != nil {
			return nil, err
		}
		s.proxy, s.proxyCleanup = proxy, cleanup
	}
	s.env = append([]string(nil), sp.Exec.Env...) // the proxy's settings, if any
	note := func(format string, args ...any) { s.notes = append(s.notes, fmt.Sprintf(format, args...)) }
	if cg != nil {
		if err := cg.SetLimits(e.groupLimits(l)); err != nil {
			return nil, err
		}
	} else {
		note("S1: no cgroup of its own (sandbox is not root, or no cgroup hierarchy is mounted): the sandbox's memory, process and CPU limits are recorded but not enforced")
	}
	if s.kept, err = e.keepAside(sp); err != nil {
		return nil, err
	}
	var lease *idLease
	if !sp.Base.UserNS {
		// The sandbox's own host identity, for its whole life: every
		// exec runs as it. Given back once init, and with it every
		// process of the sandbox, has ended (Close).
		if lease, err = e.ids().lease(); err != nil {
			s.kept(&s1init.Status{})
			return nil, err
		}
		sp.Exec.HostUID, sp.Exec.HostGID = lease.ID, lease.ID
	}
	unmap, err := e.mapOwners(sp, note)
	s.release = func() { unmap(); lease.Release() }
	if err != nil {
		s.release()
		s.kept(&s1init.Status{})
		return nil, err
	}
	p, err := e.startInit(sp.Base, true, nil, nil)
	if err != nil {
		s.release()
		return nil, err
	}
	s.p = p
	sp.Base.Root = e.rootMount()
	if len(listen) > 0 {
		// Its ports are reached in its own namespace, held from now on.
		// init has just started (were it already gone, sending its spec
		// below fails and the session is not opened).
		if s.netns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", p.cmd.Process.Pid)); err != nil {
			p.discard()
			s.release()
			return nil, fmt.Errorf("S1: hold the sandbox's network namespace: %w", err)
		}
	}
	if cg != nil {
		if err := cg.AddProc(p.cmd.Process.Pid); err != nil {
			p.discard()
			s.release()
			return nil, err
		}
	}
	// init's own streams carry nothing of an exec's; drained.
	p.stdinW.Close()
	go io.Copy(io.Discard, p.stdoutR)
	go io.Copy(io.Discard, p.stderrR)
	if err := json.NewEncoder(p.specW).Encode(sp); err != nil {
		p.discard()
		s.release()
		return nil, fmt.Errorf("S1: send the sandbox's init its spec: %w", err)
	}
	p.specW.Close()
	s.sessFD, s.ctlFD, s.ctlDone = int(p.session.Fd()), int(p.ctl.Fd()), make(chan struct{})
	go s.serveCtl()
	go s.read()
	opened = true
	return s, nil
}

var errNotYet = &notYetError{}

type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Invalid() bool { return true }

type notYetError struct{}

func (*notYetError) Error() string { return "not supported" }

// Invalid: a request for what a live sandbox does not give is refused as
// bad input, not as a host failure.
func (*notYetError) Invalid() bool { return true }

// serveCtl answers init's control socket (nothing is asked of a session
// today: no egress, no exec control) until it closes.
func (s *Session) serveCtl() {
	defer close(s.ctlDone)
	s.e.serveCtl(s.ctlFD, launchOpts{proxy: s.proxy})
}

// read dispatches init's session messages to the execs waiting for them.
func (s *Session) read() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	fd := s.sessFD
	for {
		n, _, _, _, err := unix.Recvmsg(fd, buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		var m s1init.SessionMsg
		if json.Unmarshal(buf[:n], &m) != nil {
			return // init speaks only JSON: anything else ends the session
		}
		s.mu.Lock()
		ch := s.waiting[m.ID]
		s.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
	}
}

// HostID is the host uid and gid the sandbox's processes run as (its
// user, 65534, inside its user namespaces), no other process's on the
// host while the sandbox lives; 0 rootless, where they are the invoking
// user's.
func (s *Session) HostID() int { return s.sp.Exec.HostUID }

// Notes are remarks about the sandbox for the caller.
func (s *Session) Notes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.notes...)
}

// Alive says whether the sandbox's init still runs. It only looks: Close
// still takes init's exit.
func (s *Session) Alive() bool {
	select {
	case <-s.done:
		return false
	case <-s.p.exited:
		return false
	default:
		return true
	}
}

// DrainAfter is how long an exec's output is still taken after its
// program ended (what it wrote just before exiting); after that, what a
// background process it started writes to the same streams is discarded
// (never left blocked on a full pipe).
var DrainAfter = 20 * time.Millisecond

// Run runs one exec in the sandbox: the job's program, with its
// environment and working directory, its streams, and j.Cgroup (a group
// made for the exec, with cpuacct) as its CPU group. Its deadline, a
// budget stop or a cancelled ctx end the exec's process group, not the
// sandbox.
func (s *Session) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if !s.Alive() {
		return nil, ErrSessionEnded
	}
	res := &executor.Result{Executor: s.e.Name() + " (live sandbox)"}
	if j.Enforcer != nil {
		logBinds(s.sp, j.Enforcer, "committed when the sandbox is removed")
	}
	var closeLater []*os.File
	defer func() {
		for _, f := range closeLater {
			f.Close()
		}
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, err
	}
	closeLater = append(closeLater, inR, outW, errW)
	send := []int{int(inR.Fd()), int(outW.Fd()), int(errW.Fd())}
	if j.Cgroup != nil {
		tasks, err := j.Cgroup.TaskFiles("cpuacct")
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("S1: the exec has no CPU group of its own (%v): its CPU time is not told apart from the sandbox's other processes", err))
			j.Cgroup = nil
		}
		for _, f := range tasks {
			closeLater = append(closeLater, f)
			send = append(send, int(f.Fd()))
		}
	}
	env := make([]string, 0, len(j.Unit.Env))
	keys := make([]string, 0, len(j.Unit.Env))
	for k := range j.Unit.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+j.Unit.Env[k])
	}
	for _, kv := range s.env { // the sandbox's (its proxy's), where the exec sets none
		k, _, _ := strings.Cut(kv, "=")
		if _, set := j.Unit.Env[k]; !set {
			env = append(env, kv)
		}
	}
	// Where the sandbox's log stood when the exec began.
	var mark int
	var lastCount int64
	if s.enf != nil {
		mark, lastCount = s.enf.Mark()
	}
	args := j.Unit.Args
	if len(args) == 0 {
		args = []string{filepath.Base(j.Unit.Entry)}
	}
	s.mu.Lock()
	s.next++
	id := s.next
	ch := make(chan s1init.SessionMsg, 2)
	s.waiting[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
	}()
	// The streams: the caller's until the program ends (and DrainAfter),
	// then discarded for as long as anything in the sandbox holds them.
	outP, errP := newPump(outR, j.Stdout), newPump(errR, j.Stderr)
	var start, end time.Time
	msg := s1init.SessionMsg{Op: "exec", ID: id, Path: j.Unit.Entry, Args: args, Env: env, Dir: j.Unit.Dir}
	if err := s.send(msg, send); err != nil {
		inW.Close()
		outP.stop(0)
		errP.stop(0)
		return nil, fmt.Errorf("%w: %v", ErrSessionEnded, err)
	}
	start = time.Now()
	for _, f := range closeLater {
		f.Close()
	}
	closeLater = nil
	if j.Stdin != nil {
		go func() { io.Copy(inW, j.Stdin); inW.Close() }()
	} else {
		inW.Close()
	}
	var st s1init.Status
	var ending ending
	select {
	case m := <-ch:
		if m.Op != "started" && m.Op != "failed" {
			st = s1init.Status{Error: fmt.Sprintf("init: %q came before the exec's start", m.Op)}
			end = time.Now()
			break
		}
		if m.Op == "failed" {
			st = s1init.Status{Error: m.Error, ExecErrno: m.Errno}
			end = time.Now()
			break
		}
		st.Started = true
		var timeout <-chan time.Time
		if j.Deadline > 0 {
			t := time.NewTimer(j.Deadline)
			defer t.Stop()
			timeout = t.C
		}
		kill := func(sig syscall.Signal) { s.send(s1init.SessionMsg{Op: "kill", ID: id, Signal: int(sig)}, nil) }
		var exited s1init.SessionMsg
		wait := func() bool {
			select {
			case exited = <-ch:
				return exited.Op == "exited"
			case <-s.done:
				return false
			}
		}
		got := false
		select {
		case exited = <-ch:
			got = exited.Op == "exited"
		case <-s.done:
		case <-timeout:
			ending.deadline = true
			kill(syscall.SIGKILL)
			got = wait()
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), executor.ErrBudget) {
				ending.budget = true
				kill(syscall.SIGKILL)
				got = wait()
				break
			}
			ending.canceled = true
			kill(syscall.SIGINT)
			select {
			case exited = <-ch:
				got = true
			case <-s.done:
			case <-time.After(KillGrace):
				kill(syscall.SIGKILL)
				got = wait()
			}
		}
		end = time.Now()
		switch {
		case got && exited.Exited:
			st.Exited, st.Code = true, exited.Code
		case got:
			st.Signal = exited.Signal
		default:
			st.Error = "the sandbox's init ended while the exec ran"
		}
	case <-s.done:
		end = time.Now()
		st.Error = "the sandbox's init ended before the exec started"
	}
	outP.stop(DrainAfter)
	errP.stop(DrainAfter)
	if s.enf != nil && j.Enforcer != nil {
		// The connections the sandbox made while the exec ran: its own,
		// or a background process's (the proxy cannot tell them apart).
		s.enf.ReplayInto(j.Enforcer, mark, lastCount)
	}
	ending.start, ending.end = start, end
	res.Start, res.End = start, end
	res.Outcome = outcomeOf(st, s.cg, ending)
	if st.Error != "" && st.ExecErrno == 0 && !st.Started && res.Outcome.Status == attest.Failed {
		res.Outcome.Detail = st.Error
	}
	res.ExecErrno, res.Signal = syscall.Errno(st.ExecErrno), syscall.Signal(st.Signal)
	return res, nil
}

func (s *Session) send(m s1init.SessionMsg, fds []int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.fdsClosed { // the descriptor's number may be another file's now
		return ErrSessionEnded
	}
	return unix.Sendmsg(s.sessFD, b, oob, nil, 0)
}

// Close ends the sandbox: every process in it ends, and its quota'd
// writes are committed (init has CommitGrace); an error says what did
// not go through (a commit that failed keeps the writes aside).
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	s.mu.Unlock()
	p := s.p
	grace := time.After(CommitGrace)
	again := time.NewTicker(50 * time.Millisecond)
	defer again.Stop()
wait:
	for {
		p.cmd.Process.Signal(s1init.EndSignal)
		select {
		case <-p.done:
			break wait
		case <-again.C:
		case <-grace:
			s.mu.Lock()
			s.notes = append(s.notes, fmt.Sprintf("S1: init did not end the sandbox and commit its writes within %s; killed", CommitGrace))
			s.mu.Unlock()
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			break wait
		}
	}
	if s.cg != nil {
		s.cg.Thaw()
	}
	unix.Shutdown(s.ctlFD, unix.SHUT_RDWR)
	unix.Shutdown(s.sessFD, unix.SHUT_RDWR)
	<-s.done
	<-s.ctlDone
	b, _ := io.ReadAll(p.statR)
	st := initReport(b, p.cmd.ProcessState, ending{})
	s.kept(&st)
	s.sendMu.Lock()
	s.fdsClosed = true
	for _, f := range []*os.File{p.statR, p.stdoutR, p.stderrR, p.ctl, p.session} {
		f.Close()
	}
	s.sendMu.Unlock()
	if s.netns != nil {
		s.netns.Close()
	}
	s.release()
	s.proxyCleanup()
	if st.Error != "" {
		s.closeErr = errors.New(st.Error)
	}
	return s.closeErr
}

// Freeze stops every process of the sandbox (its cgroup's freezer) until
// Thaw. A sandbox without a cgroup of its own cannot be frozen.
func (s *Session) Freeze(context.Context) error {
	if s.cg == nil {
		return errNoGroup
	}
	return s.cg.Freeze()
}

// Thaw lets a frozen sandbox's processes run on.
func (s *Session) Thaw(context.Context) error {
	if s.cg == nil {
		return errNoGroup
	}
	return s.cg.Thaw()
}

// Frozen reads back from the sandbox's cgroup whether all of it is
// frozen ("frozen" or "thawed").
func (s *Session) Frozen(context.Context) (bool, string, error) {
	if s.cg == nil {
		return false, "", errNoGroup
	}
	frozen, err := s.cg.Frozen()
	if err != nil {
		return false, "", err
	}
	if frozen {
		return true, "frozen", nil
	}
	return false, "thawed", nil
}

// errNoGroup refuses to freeze a sandbox that has no cgroup of its own.
var errNoGroup = fmt.Errorf("%w: the sandbox has no cgroup of its own (sandbox is not root, or no cgroup hierarchy is mounted), so nothing can freeze it", cgroup.ErrNoCgroups)

// pump copies a stream to a writer until stopped, then discards the rest
// until the stream's last writer closes it.
type pump struct {
	r    *os.File
	mu   sync.Mutex
	w    io.Writer
	done chan struct{}
}

func newPump(r *os.File, w io.Writer) *pump {
	if w == nil {
		w = io.Discard
	}
	p := &pump{r: r, w: w, done: make(chan struct{})}
	go func() {
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				p.mu.Lock()
				p.w.Write(buf[:n])
				p.mu.Unlock()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// What the pipe holds now was written before the stop
				// (the program's last words among it): the caller's,
				// taken without waiting, however late this goroutine
				// ran. Only what comes after is discarded.
				r.SetReadDeadline(time.Time{})
				drain.Now(r, buf, func(b []byte) {
					p.mu.Lock()
					p.w.Write(b)
					p.mu.Unlock()
				})
				close(p.done)
				p.mu.Lock()
				p.w = io.Discard
				p.mu.Unlock()
				continue
			}
			if err != nil {
				select {
				case <-p.done:
				default:
					close(p.done)
				}
				return
			}
		}
	}()
	return p
}

// stop lets the pump take what comes within d (and whatever the stream
// holds when d has passed), then waits until it has stopped writing to
// its writer.
func (p *pump) stop(d time.Duration) {
	p.r.SetReadDeadline(time.Now().Add(d))
	<-p.done
}
