package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/internal/crash"
)

// jcpSetup makes root (trusted), alice and bob in home, a grant from
// root to alice of 10 J of CPU on hello at S2, and its delegation to bob
// of 3 J; it returns hello and the two chain files.
func jcpSetup(t *testing.T, home string) (hello, alice, bob string) {
	t.Helper()
	hello = guestPath(t, "hello")
	dir := t.TempDir()
	alice, bob = filepath.Join(dir, "alice.jcp"), filepath.Join(dir, "bob.jcp")
	for _, args := range [][]string{
		{"jcp", "principal", "new", "root", "--root"},
		{"jcp", "principal", "new", "alice"},
		{"jcp", "principal", "new", "bob"},
		{"jcp", "mint", "--from", "root", "--to", "alice", "--image", hello, "--ceiling", "cpu:10J", "--caveat", "tiers=S2", "-o", alice},
		{"jcp", "delegate", alice, "--from", "alice", "--to", "bob", "--ceiling", "cpu:3J", "-o", bob},
	} {
		if out, errOut, code := sandbox(t, home, args...); code != 0 {
			t.Fatalf("%v: %d %s %s", args, code, out, errOut)
		}
	}
	return hello, alice, bob
}

func TestJCPCommands(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	hello, alice, bob := jcpSetup(t, home)
	expect := func(code int, want string, args ...string) string {
		t.Helper()
		out, errOut, c := sandbox(t, home, args...)
		if c != code || !strings.Contains(out+errOut, want) {
			t.Fatalf("%v: exit %d (want %d), want %q in:\n%s%s", args, c, code, want, out, errOut)
		}
		return out
	}
	expect(0, "OK", "jcp", "verify", bob)
	expect(2, "widen-ceiling", "jcp", "delegate", alice, "--from", "alice", "--to", "bob", "--ceiling", "cpu:11J", "-o", filepath.Join(t.TempDir(), "x"))
	expect(2, "not the audience", "jcp", "delegate", alice, "--from", "bob", "--to", "bob", "-o", filepath.Join(t.TempDir(), "x"))
	expect(0, "hello", "run", "-q", "--jcp", bob, "--as", "bob", "--grant", "cpu:1J", "--", hello)
	pub, err := os.ReadFile(filepath.Join(home, "host.pub"))
	if err != nil {
		t.Fatal(err)
	}
	out := expect(0, "jcp-decision", "verify", "--trust", strings.TrimSpace(string(pub)), "last")
	if strings.Contains(out, "FAIL") {
		t.Fatal(out)
	}
	expect(125, "over-ceiling", "run", "-q", "--jcp", bob, "--as", "bob", "--grant", "cpu:5J", "--", hello)
	expect(125, "not the audience", "run", "-q", "--jcp", bob, "--as", "alice", "--", hello)
	show := expect(0, "ceiling 3 J", "jcp", "show", bob)
	if !strings.Contains(show, "runs 1") || !strings.Contains(show, "reserved 0 J") {
		t.Fatalf("show:\n%s", show)
	}
	run := "b3:" + strings.Repeat("ab", 32)
	expect(0, "checkpoint", "jcp", "checkpoint", bob, "--as", "bob", "--run", run)
	expect(0, "(seq 2)", "jcp", "checkpoint", bob, "--as", "bob", "--run", run)
	expect(6, "wrong-audience", "jcp", "checkpoint", bob, "--as", "alice", "--run", run)
	expect(6, "amend-not-issuer", "jcp", "amend", bob, "--from", "bob", "--ceiling", "cpu:1J")
	expect(6, "amend-widens", "jcp", "amend", bob, "--from", "alice", "--ceiling", "cpu:4J")
	expect(0, "amended", "jcp", "amend", bob, "--from", "alice", "--ceiling", "cpu:2J")
	expect(0, "revoked", "jcp", "revoke", alice, "--from", "root")
	expect(125, "revoked", "run", "-q", "--jcp", bob, "--as", "bob", "--grant", "cpu:1J", "--", hello)
	expect(0, "REVOKED", "jcp", "ledger")
	expect(0, "OK", "jcp", "ledger", "verify")
	// Every denial of the gate was sealed and kept: over the ceiling,
	// and revoked (--as alice was refused before anything was presented).
	ds, _ := os.ReadDir(filepath.Join(home, "jcp", "decisions"))
	if len(ds) != 2 {
		t.Fatalf("%d denied decisions kept, want 2", len(ds))
	}
}

// kill -9 of sandbox after a gated run's reservation, and after its seal
// before the post: the ledger verifies after either, nothing is posted
// twice, and a sealed run's energy is posted when the ledger is next
// opened.
func TestJCPKilledBetweenReserveAndPost(t *testing.T) {
	t.Parallel()
	for _, point := range []string{crash.JCPReserved, crash.Sealed} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			hello, _, bob := jcpSetup(t, home)
			cmd := cliCmd(t, home, []string{crash.Env + "=" + point}, "run", "-q", "--jcp", bob, "--as", "bob", "--grant", "cpu:1J", "--", hello)
			out, _ := cmd.CombinedOutput()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("not killed at %s: %v\n%s", point, cmd.ProcessState, out)
			}
			show, errOut, code := sandbox(t, home, "jcp", "show", bob)
			if code != 0 {
				t.Fatalf("show: %s %s", show, errOut)
			}
			switch point {
			case crash.JCPReserved: // nothing ran: held until its until
				if !strings.Contains(show, "reserved 1 J") || !strings.Contains(show, "spent 0 J") {
					t.Fatalf("after a kill at %s:\n%s", point, show)
				}
			case crash.Sealed: // the run is sealed: posted on the next opening
				if !strings.Contains(show, "reserved 0 J") || strings.Contains(show, "spent 0 J") {
					t.Fatalf("after a kill at %s:\n%s", point, show)
				}
			}
			again, _, _ := sandbox(t, home, "jcp", "show", bob)
			if again != show {
				t.Fatalf("a second opening changed the budgets:\n%s\nthen\n%s", show, again)
			}
			if v, e, code := sandbox(t, home, "jcp", "ledger", "verify"); code != 0 || !strings.Contains(v, "OK") {
				t.Fatalf("ledger verify: %d %s %s", code, v, e)
			}
		})
	}
}
