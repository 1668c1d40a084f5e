package native

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/audit"
	"github.com/opensubstrate/sandbox/internal/audit/audittest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// TestDenialReportsAskedOncePerMoment: DenialReports asks the kernel
// once for any number of runs within DenialReportsFresh, and again at
// once after this process turns audit on or off, with the new answer.
// It holds the host-wide audit lock throughout, so that no other test
// process turns audit on or off between its readings.
func TestDenialReportsAskedOncePerMoment(t *testing.T) {
	audittest.Lock(t)
	asked := 0
	ask := askDenials
	askDenials = func() (bool, string, bool) { asked++; return ask() }
	t.Cleanup(func() { askDenials = ask })
	denials.mu.Lock()
	denials.at = time.Time{}
	denials.mu.Unlock()
	before, why := DenialReports()
	for range 50 {
		if ok, w := DenialReports(); ok != before || w != why {
			t.Fatalf("answer changed with nothing changing: %v %q, then %v %q", before, why, ok, w)
		}
	}
	if asked != 1 {
		t.Fatalf("asked the kernel %d times for 51 answers within %s", asked, DenialReportsFresh)
	}
	denials.mu.Lock()
	denials.at = denials.at.Add(-DenialReportsFresh)
	denials.mu.Unlock()
	DenialReports()
	if asked != 2 {
		t.Fatalf("an answer %s old was not asked again (asked %d times)", DenialReportsFresh, asked)
	}
	if s1init.ABI() < 7 || os.Geteuid() != 0 || before {
		return // nothing turns it on here, or it is on already
	}
	if err := audit.SetEnabled(true); err != nil {
		t.Skipf("audit cannot be turned on here: %v", err)
	}
	ok, why2 := DenialReports()
	if err := audit.SetEnabled(false); err != nil {
		t.Fatalf("audit left on: %v", err)
	}
	if !ok {
		t.Errorf("audit turned on in this process, and DenialReports still says: %s", why2)
	}
	if ok, why3 := DenialReports(); ok {
		t.Errorf("audit turned off again in this process, and DenialReports still says: %s", why3)
	}
}

// TestKernelDenialsAreLogged: with audit enabled, what Landlock refuses
// inside an S1 run is in its decision log (a fifo and a file made where
// the run may only read, a TCP connection with no grant), each merged
// with its repeats; the tier probe's own denials are not the run's.
func TestKernelDenialsAreLogged(t *testing.T) {
	if abi := s1init.ABI(); abi < 7 {
		t.Skipf("Landlock ABI %d reports no denials", abi)
	}
	audittest.WithEnabled(t, func() {
		if ok, why := DenialReports(); !ok {
			t.Fatalf("audit is on and yet: %s", why)
		}
		e := testExecutor(t)
		if p := e.Probe(context.Background()); !p.Available {
			t.Skipf("S1 is unavailable: %s", p.Reason)
		}
		g := mustGrants(t)
		script := `mkfifo /dev/f; for i in 1 2 3; do (echo x > /dev/y) 2>/dev/null; done
python3 -c 'import socket; socket.create_connection(("1.1.1.1", 53), timeout=1)' 2>/dev/null; echo end`
		u := unit.Unit{Kind: tier.Native, Image: addr.Of([]byte("sh")), Entry: "/bin/sh", Args: []string{"sh", "-c", script},
			Env: map[string]string{"PATH": "/usr/bin:/bin"}}
		enf := grant.NewEnforcer(g)
		var out, errb bytes.Buffer
		res, err := e.Run(context.Background(), &executor.Job{Unit: u, Grants: g, Enforcer: enf, Stdout: &out, Stderr: &errb, Deadline: time.Minute})
		if err != nil || out.String() != "end\n" {
			t.Fatalf("%v %+v %q %q", err, res, out.String(), errb.String())
		}
		if strings.Contains(errb.String(), "sandbox:") {
			t.Errorf("the host's notes are in the run's stderr: %q (they belong in Result.Notes)", errb.String())
		}
		log := enf.Log()
		text := logText(log)
		for _, want := range []string{
			"fs write /dev false landlock: fs.make_fifo (reported by the kernel)",
			"fs write /dev false landlock: fs.make_reg (reported by the kernel)",
			"net connect 1.1.1.1:53 false landlock: net.connect_tcp (reported by the kernel)",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("no %q in the log:\n%s", want, text)
			}
		}
		for _, d := range log.Decisions {
			if strings.Contains(d.Rule, "make_reg") && d.Count != 3 {
				t.Errorf("three refused creations of /dev/y: count %d", d.Count)
			}
			if strings.Contains(d.Target, "sandbox-canary") {
				t.Errorf("the tier probe's denial is in the run's log: %+v", d)
			}
		}
		if _, err := grant.DecodeLog(mustCanonical(t, log)); err != nil {
			t.Errorf("the log does not decode: %v", err)
		}
	})
}

func mustCanonical(t *testing.T, l grant.Log) []byte {
	t.Helper()
	b, _, err := l.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKernelDenialsNeedAudit: with audit off, S1 says why it logs none.
func TestKernelDenialsNeedAudit(t *testing.T) {
	if os.Geteuid() != 0 || s1init.ABI() < 7 {
		t.Skip("root and Landlock ABI 7 are what this is about")
	}
	audittest.Lock(t)
	st, err := audit.GetStatus()
	if err != nil || st.Enabled {
		t.Skipf("audit status %+v %v: this test needs it off", st, err)
	}
	if ok, why := DenialReports(); ok || !strings.Contains(why, "audit is disabled") {
		t.Fatalf("%v %s", ok, why)
	}
}
