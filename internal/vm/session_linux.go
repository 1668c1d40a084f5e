package vm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/confine/netns"
	"github.com/opensubstrate/sandbox/internal/egress"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
)

// Session is a live S5 sandbox: one VM, booted once, that runs every
// exec of the sandbox, and can be suspended to a memory image and
// resumed from it with its processes and memory.
type Session struct {
	e     *Executor
	m     *Machine
	spec  Spec
	cg    *cgroup.Group
	name  string
	notes []string

	// With net grants: the sandbox's egress proxy, the log of its
	// decisions (each exec takes those made while it ran), the proxy's
	// settings for every exec, and the files the guest trusts it by.
	proxy *egress.Proxy
	enf   *grant.Enforcer
	env   map[string]string
	files map[string][]byte

	// netns is the network namespace of its monitor, where its listen
	// ports (spec.Listen) are reached: held from its start, the
	// monitor's whatever becomes of its pid.
	netns *os.File

	mu sync.Mutex
	// cpuHeld says an exec's group holds QEMU for its accounting.
	cpuHeld bool
	closed  bool
}

// Open boots a live sandbox's VM with its grants (its workspace among
// them) and limits, QEMU in cg.
func (e *Executor) Open(ctx context.Context, g grant.Set, lim unit.Limits, cg *cgroup.Group) (*Session, error) {
	return e.open(ctx, g, lim, cg, "", nil)
}

// Reopen resumes a suspended sandbox's VM from its memory image (a file
// whose address the caller checked), with the grants it has now: the
// same shares in the same order, its workspace perhaps at another path.
func (e *Executor) Reopen(ctx context.Context, g grant.Set, lim unit.Limits, cg *cgroup.Group, memory string) (*Session, error) {
	return e.open(ctx, g, lim, cg, memory, nil)
}

// open boots (or, from memory, resumes) a live sandbox's VM, its guest
// listening on the ports in listen (SessionSpec.Listen).
func (e *Executor) open(ctx context.Context, g grant.Set, lim unit.Limits, cg *cgroup.Group, memory string, listen []int) (s *Session, err error) {
	j := &executor.Job{Grants: g, Unit: unit.Unit{Limits: lim}}
	if err := check(j); err != nil {
		return nil, err
	}
	im, err := boot.Open(e.cfg.ImageDir)
	if err != nil {
		return nil, err
	}
	if _, err := e.version(); err != nil {
		return nil, err
	}
	accel, why := e.accelerator(ctx, im)
	dir, err := e.cfg.mkTemp("sandbox-vm")
	if err != nil {
		return nil, err
	}
	s = &Session{e: e, cg: cg, name: e.executorName(accel), notes: []string{e.accelNote(accel, why),
		guestNote(im)}}
	made := s // s is nil once an error is returned
	defer func() {
		if err != nil {
			made.Close()
		}
	}()
	listen = slices.Compact(slices.Sorted(slices.Values(listen))) // one forward a port
	s.spec = Spec{Image: im, QEMU: e.cfg.QEMU, Jail: e.cfg.Jail, Accel: accel, Dir: dir, Cgroup: cg, Hostname: "sandbox", Incoming: memory, Listen: listen}
	s.spec.MemoryMiB, s.spec.CPUs = e.cfg.size(lim)
	if err := limitVM(cg, s.spec.MemoryMiB, lim); err != nil {
		return nil, err
	}
	if s.spec.Shares, err = e.shares(g.Storage, nil, true); err != nil {
		return nil, err
	}
	defer closeShares(s.spec.Shares) // QEMU has its own once started
	if len(g.Net) > 0 {
		// One egress proxy for the sandbox, as at S1: a resumed VM
		// reaches a new one at the same guest address (served, as each
		// VM's, to that VM's QEMU only).
		s.enf = grant.NewEnforcer(g)
		s.proxy, s.env, s.files, err = newProxy(&executor.Job{Grants: g, Enforcer: s.enf}, e.cfg.EgressRoots)
		if err != nil {
			return nil, err
		}
		s.spec.Egress, s.spec.Refused = s.proxy, refusedNote(s.enf)
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout(s.spec.Accel))
	defer cancel()
	if s.m, err = Start(bctx, s.spec); err != nil {
		return nil, err
	}
	if len(listen) > 0 {
		if s.netns, err = s.m.NetNS(); err != nil {
			return nil, err
		}
	}
	if memory != "" {
		// Resumed: the guest let go of its shares before it was
		// snapshotted; it mounts them again, as they are here now.
		if err := s.m.setup(bctx); err != nil {
			return nil, err
		}
		s.notes = append(s.notes, "S5: resumed from a memory image: the guest's processes and memory are those it was suspended with")
	}
	// The trust bundle names this proxy's authority (a new one after a
	// resumption): written each time the VM starts.
	for p, b := range s.files {
		if err := s.m.WriteFile(bctx, p, b, 0o644); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Notes are the session's remarks, for its first exec's record.
func (s *Session) Notes() []string { return append([]string(nil), s.notes...) }

// Alive says whether the VM still runs.
func (s *Session) Alive() bool {
	select {
	case <-s.m.Exited():
		return false
	default:
		return true
	}
}

// Run runs one exec in the VM. While it runs, QEMU's process is counted
// in the exec's own group (j.Cgroup), so the meter sees the VM's CPU; an
// exec that overlaps another's says its VM time was counted there.
func (s *Session) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	if !s.Alive() {
		return nil, fmt.Errorf("vm: the sandbox's VM has ended: %w", s.m.ended(nil))
	}
	if err := check(j); err != nil {
		return nil, err
	}
	res := &executor.Result{Executor: s.name}
	if j.Cgroup != nil && s.cg != nil {
		s.mu.Lock()
		held := s.cpuHeld
		if !held {
			if err := j.Cgroup.AddProc(s.m.Pid()); err == nil {
				s.cpuHeld = true
				defer func() {
					s.cg.AddProc(s.m.Pid())
					s.mu.Lock()
					s.cpuHeld = false
					s.mu.Unlock()
				}()
			} else {
				held = true
			}
		}
		s.mu.Unlock()
		if held {
			res.Notes = append(res.Notes, "S5: this exec overlapped another, whose record counts the VM's CPU for the time they shared")
		}
	}
	if err := writeProgram(ctx, s.m, j, s.spec.mounts()); err != nil {
		return nil, err
	}
	var deadline <-chan time.Time
	if j.Deadline > 0 {
		t := time.NewTimer(j.Deadline)
		defer t.Stop()
		deadline = t.C
	}
	env := j.Unit.Env
	var mark int
	var lastCount int64
	if s.enf != nil {
		env = withDefaults(env, s.env)
		mark, lastCount = s.enf.Mark()
	}
	res.Start = time.Now()
	res, err := execute(ctx, s.m, j, env, res, deadline, true)
	if s.enf != nil && j.Enforcer != nil {
		// The connections the guest made while the exec ran: its own, or
		// a background process's (the proxy cannot tell them apart).
		s.enf.ReplayInto(j.Enforcer, mark, lastCount)
	}
	return res, err
}

// Suspend lets the guest unmount its shares (refused, with the reason,
// while a process holds a file in one), pauses it, and writes its memory
// image to path. The VM stays paused: Close it, or Continue it.
func (s *Session) Suspend(ctx context.Context, path string) (*executor.Snapshot, error) {
	if err := s.m.quiesce(ctx); err != nil {
		s.m.setup(ctx) // mount again what it let go of
		return nil, err
	}
	snap, err := s.m.Snapshot(ctx, path)
	if err != nil {
		s.Continue(ctx)
		return nil, err
	}
	return snap, nil
}

// Paused reads back from the VM's monitor whether its vCPUs are stopped,
// with the monitor's word for its state ("postmigrate" after a
// suspension): a witness of quiescence that is not the guest's.
func (s *Session) Paused(ctx context.Context) (bool, string, error) {
	running, status, err := s.m.state(ctx)
	return !running && err == nil, status, err
}

// Continue lets a VM a suspension paused run on, with its shares.
func (s *Session) Continue(ctx context.Context) error {
	if err := s.m.resume(ctx); err != nil {
		return err
	}
	return s.m.setup(ctx)
}

// Freeze stops the VM's vCPUs through its monitor until Thaw: nothing of
// the guest runs. Its shares stay mounted (Suspend lets go of them).
func (s *Session) Freeze(ctx context.Context) error { return s.m.pause(ctx) }

// Thaw lets the VM's vCPUs run on.
func (s *Session) Thaw(ctx context.Context) error { return s.m.resume(ctx) }

// Frozen is Paused: the monitor's word, not the guest's.
func (s *Session) Frozen(ctx context.Context) (bool, string, error) { return s.Paused(ctx) }

// Close ends the VM and the sandbox's egress proxy.
func (s *Session) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if s.m != nil {
		s.m.Kill()
	}
	if s.netns != nil {
		s.netns.Close()
	}
	if s.proxy != nil {
		s.proxy.Close()
	}
	return os.RemoveAll(s.spec.Dir)
}

// DialPort connects to port in the guest, one of those it was made to
// listen on, through its monitor's forwarding: from the loopback of the
// monitor's network namespace (the jail's, held since the VM started)
// to the guest's address, 10.0.2.15. A server in the guest must listen
// on that address (or on all of them): one bound to the guest's own
// loopback alone is not reached. Entering the namespace needs the
// service to hold CAP_SYS_ADMIN over it (root).
func (s *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if !slices.Contains(s.spec.Listen, port) {
		return nil, &portError{fmt.Sprintf("port %d: not one of the sandbox's listen ports (it listens on %v)", port, s.spec.Listen)}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed || !s.Alive() {
		return nil, fmt.Errorf("port %d: the sandbox's VM has ended", port)
	}
	// Bounded whatever the caller's context: a guest that never answers
	// (a stilled VM, a hostile agent) holds no dial, nor its slot.
	ctx, cancel := context.WithTimeout(ctx, dialWait)
	defer cancel()
	// QEMU's forwarding accepts a connection whether or not anything in
	// the guest listens (and then closes it): the guest is asked first.
	if err := s.listening(ctx, port); err != nil {
		return nil, err
	}
	return netns.Dial(ctx, s.netns, "127.0.0.1", port)
}

// dialWait bounds a DialPort, the guest's answer and the connect
// together.
var dialWait = netns.DialTimeout

// listening says why nothing in the guest would answer on port, if
// nothing would: no listening socket on it, or one on the guest's
// loopback alone. Both wrap ECONNREFUSED, as a refused connect does.
func (s *Session) listening(ctx context.Context, port int) error {
	var tables [2][]byte
	for i, p := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := s.m.ReadFile(ctx, p, MaxNetTable)
		var ge *GuestError
		if err != nil && !(i == 1 && errors.As(err, &ge) && ge.Errno == syscall.ENOENT) {
			return fmt.Errorf("port %d: what the guest listens on: %w", port, err)
		}
		tables[i] = b
	}
	l, err := ListeningOn(tables[0], tables[1], port)
	switch {
	case err != nil:
		return fmt.Errorf("port %d: what the guest listens on: %w", port, err)
	case l.Reachable:
		return nil
	case l.Loopback:
		return fmt.Errorf("port %d: the guest listens on it on its loopback alone, which the host does not reach (listen on 0.0.0.0 or %s): %w", port, GuestIP, syscall.ECONNREFUSED)
	}
	return fmt.Errorf("port %d: nothing in the guest listens on it: %w", port, syscall.ECONNREFUSED)
}

// portError is a port asked of a sandbox that was not made to listen on
// it: bad input.
type portError struct{ msg string }

func (e *portError) Error() string { return e.msg }
func (e *portError) Invalid() bool { return true }
