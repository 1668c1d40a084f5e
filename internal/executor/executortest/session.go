package executortest

import (
	"context"
	"errors"
	"github.com/opensubstrate/sandbox/internal/errs"
	"io"
	"os"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/tier"
)

// execControllers are those of a session's exec's own group, as the
// engine makes it: its CPU time is its own, its limits the session's.
var execControllers = []string{"cpuacct"}

// session checks a Sessioner's sessions with p.
func session(t *testing.T, sx executor.Sessioner, p *SessionPrograms, h *cgroup.Hierarchy, noGroups string) {
	ctx := context.Background()
	spec := p.Spec(t)
	// The session's group and its execs' (which hold what an exec left
	// running), made for the session's whole test: empty once it is
	// closed.
	var made []*cgroup.Group
	var mk groups
	if h != nil {
		mk = func() *cgroup.Group {
			g := group(t, h, execControllers...)
			made = append(made, g)
			return g
		}
		spec.Cgroup = group(t, h, "cpuacct", "cpu", "memory", "pids", "freezer")
		made = append(made, spec.Cgroup)
	}
	s, err := sx.OpenSession(ctx, spec)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if !s.Alive() {
		t.Fatal("a session just opened is not alive")
	}
	s.Notes()
	exec := func(t *testing.T, p Program, d time.Duration, stop error) *ran {
		t.Helper()
		return run(t, s.Run, p, mk, d, stop)
	}
	check := func(t *testing.T, s executor.Session) {
		t.Helper()
		r := run(t, s.Run, p.Check, mk, 0, nil)
		r.exited(t, p.Check.Code)
		r.streams(t, p.Check)
	}
	t.Run("execs share processes and files", func(t *testing.T) {
		r := exec(t, p.Start, 0, nil)
		r.exited(t, p.Start.Code)
		check(t, s)
	})
	t.Run("an exec's deadline ends the exec", func(t *testing.T) {
		exec(t, p.Hang, 300*time.Millisecond, nil).status(t, attest.Deadline)
		if !s.Alive() {
			t.Fatal("an exec's deadline ended the session")
		}
		check(t, s)
	})
	t.Run("a cancelled exec ends, the session runs on", func(t *testing.T) {
		exec(t, p.Hang, 0, context.Canceled).status(t, attest.Killed)
		if !s.Alive() {
			t.Fatal("a cancelled exec ended the session")
		}
		check(t, s)
	})
	if sx.Kind() == tier.Native {
		t.Run("an exec's budget ends the exec", func(t *testing.T) {
			exec(t, p.Hang, 0, executor.ErrBudget).status(t, attest.BudgetExhausted)
			check(t, s)
		})
	}
	t.Run("a refusal is in the exec's log", func(t *testing.T) {
		if p.Deny.Denied == nil {
			t.Fatal("the session's Deny program says not what is denied")
		}
		r := exec(t, p.Deny, 0, nil)
		r.exited(t, p.Deny.Code)
		r.denied(t, *p.Deny.Denied)
	})
	d, dialer := s.(executor.PortDialer)
	switch {
	case dialer && p.Listen == nil:
		t.Error("a PortDialer's session, yet no listen programs to check its ports with")
	case !dialer && p.Listen != nil:
		t.Error("listen programs for a session that is no PortDialer")
	case dialer:
		t.Run("its listen port is reached from the host, no other", func(t *testing.T) {
			ports(t, d, p.Listen, func(t *testing.T, p Program) *ran { return exec(t, p, 0, nil) })
		})
	}
	if f, ok := s.(executor.Freezer); ok {
		t.Run("freeze", func(t *testing.T) {
			if err := f.Freeze(ctx); err != nil {
				if errors.Is(err, cgroup.ErrNoCgroups) && spec.Cgroup == nil {
					t.Skipf("a session without a cgroup cannot be frozen, and the suite makes none: %s", noGroups)
				}
				t.Fatal(err)
			}
			frozen, state, err := f.Frozen(ctx)
			if err != nil || !frozen {
				f.Thaw(ctx)
				t.Fatalf("frozen, it reads back %v %q %v", frozen, state, err)
			}
			if err := f.Thaw(ctx); err != nil {
				t.Fatal(err)
			}
			if frozen, state, err := f.Frozen(ctx); err != nil || frozen {
				t.Fatalf("thawed, it reads back %v %q %v", frozen, state, err)
			}
			check(t, s)
		})
	}
	if sn, ok := s.(executor.Snapshotter); ok {
		t.Run("suspend and continue", func(t *testing.T) {
			snap := suspend(t, sn)
			os.Remove(snap.Path)
			if err := sn.Continue(ctx); err != nil {
				t.Fatal(err)
			}
			check(t, s)
		})
		if rx, ok := sx.(executor.Resumer); ok {
			t.Run("resume", func(t *testing.T) {
				snap := suspend(t, sn)
				closed = true
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				spec := p.Spec(t)
				if h != nil {
					spec.Cgroup = group(t, h, "cpuacct", "cpu", "memory", "pids", "freezer")
					made = append(made, spec.Cgroup)
				}
				s2, err := rx.ResumeSession(ctx, spec, snap.Path)
				if err != nil {
					t.Fatal(err)
				}
				s = s2
				closed = false
				check(t, s)
			})
		}
	}
	t.Run("close ends everything", func(t *testing.T) {
		closed = true
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s.Alive() {
			t.Fatal("alive after Close")
		}
		if err := s.Close(); err != nil {
			t.Fatalf("a second Close: %v", err)
		}
		if res, err := s.Run(ctx, prepare(t, p.Check, nil).Job); err == nil {
			t.Fatalf("a closed session ran an exec: %+v", res)
		}
		if d, ok := s.(executor.PortDialer); ok && p.Listen != nil {
			if c, err := d.DialPort(ctx, p.Listen.Port); err == nil {
				c.Close()
				t.Fatal("a closed session's port was reached")
			}
		}
		if h == nil {
			t.Logf("not checked that nothing is left running: %s", noGroups)
			return
		}
		for _, g := range made {
			if err := g.Remove(); err != nil {
				t.Errorf("a process of the session still runs after Close (its cgroup %s cannot be removed: %v)", g.Name, err)
			}
		}
	})
}

// suspend suspends a session to an image and checks the image and that
// the session reads back frozen.
func suspend(t *testing.T, sn executor.Snapshotter) *executor.Snapshot {
	t.Helper()
	ctx := context.Background()
	path := image(t)
	snap, err := sn.Suspend(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := addr.OfFile(snap.Path)
	fi, serr := os.Stat(snap.Path)
	if snap.Path != path || err != nil || serr != nil || a != snap.Addr || fi.Size() != snap.Size {
		t.Fatalf("image %+v: at %s, address %s (%v), %v", snap, path, a, err, serr)
	}
	if frozen, state, err := sn.Frozen(ctx); err != nil || !frozen {
		t.Fatalf("suspended, it reads back %v %q %v", frozen, state, err)
	}
	return snap
}

// ports checks a PortDialer: nothing to reach before a server listens, a
// port the session was not made with refused, the server's greeting read
// from the host once it listens.
func ports(t *testing.T, d executor.PortDialer, l *ListenPrograms, exec func(*testing.T, Program) *ran) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := d.DialPort(ctx, l.Port); err == nil {
		c.Close()
		t.Fatal("reached the port before anything listened on it")
	}
	other := l.Port%65535 + 1
	if c, err := d.DialPort(ctx, other); err == nil || errs.Of(err) != errs.Invalid {
		if c != nil {
			c.Close()
		}
		t.Fatalf("port %d, which the session was not made to listen on, is not refused as bad input before any dial: %v", other, err)
	}
	exec(t, l.Serve).exited(t, l.Serve.Code)
	c, err := d.DialPort(ctx, l.Port)
	if err != nil {
		t.Fatalf("the server listens, yet: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != l.Greeting {
		t.Fatalf("read %q (%v), want %q", b, err, l.Greeting)
	}
}
