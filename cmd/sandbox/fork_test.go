package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/crash"
)

// sandbox fork ID -n N: N sandboxes with the sandbox's state, listed
// (--json: the whole fork); bad counts are usage errors, an unknown
// sandbox is not found, a closed one refused.
func TestForkCLI(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	out, e, code := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo forked state > f")
	out, e, code = runCLI(t, home, "", "fork", id, "-n", "2", "--json")
	var f client.Forked
	if code != 0 || json.Unmarshal([]byte(out), &f) != nil || len(f.Children) != 2 {
		t.Fatalf("fork --json: %d %s %s", code, out, e)
	}
	for _, ch := range f.Children {
		if ch.Error != nil || ch.Sandbox == nil {
			t.Fatalf("child %+v", ch)
		}
		if got, _, _ := runCLI(t, home, "", "exec", "-q", ch.ID, "--", "cat", "f"); got != "forked state\n" {
			t.Fatalf("child %s: %q", ch.ID, got)
		}
	}
	if out, e, code := runCLI(t, home, "", "fork", id, "-n", "1", "--suspended"); code != 0 || !strings.Contains(out, "1 of 1 made") || !strings.Contains(out, "suspended") {
		t.Fatalf("fork --suspended: %d %s %s", code, out, e)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"fork", id, "-n", "0"}, 2, "-n 0: a fork makes 1 to 64"},
		{[]string{"fork", id, "-n", "65"}, 2, "-n 65"},
		{[]string{"fork", "sb-000000000000", "-n", "1"}, 3, "no such sandbox"},
		{[]string{"fork"}, 2, "accepts 1 arg"},
	} {
		if _, e, code := runCLI(t, home, "", tc.args...); code != tc.code || !strings.Contains(e, tc.says) {
			t.Errorf("%v: %d %s; want %d saying %s", tc.args, code, e, tc.code, tc.says)
		}
	}
	runCLI(t, home, "", "rm", id)
	if _, e, code := runCLI(t, home, "", "fork", id, "-n", "1"); code != 2 || !strings.Contains(e, "is closed") {
		t.Fatalf("fork of a closed sandbox: %d %s", code, e)
	}
}

// kill -9 of the service in the middle of a fork: before its children
// are named, gc leaves no stage and no child (the parent is recovered
// as any live sandbox of a dead service is); after, gc moves the staged
// objects into the store, and every child resumes with the state.
func TestForkKilledMidway(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	for _, point := range crash.ForkPoints {
		t.Run(point, func(t *testing.T) {
			home := t.TempDir()
			srv := startServeEnv(t, home, []string{crash.Env + "=" + point})
			out, e, code := runCLI(t, home, "", "create")
			id := strings.TrimSpace(out)
			if code != 0 {
				t.Fatalf("create: %s", e)
			}
			runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo the state forked > f")
			if _, _, code := runCLI(t, home, "", "fork", id, "-n", "2"); code == 0 {
				t.Fatal("the service did not die at " + point)
			}
			srv.Wait()
			if ents, _ := os.ReadDir(filepath.Join(home, "forks")); len(ents) != 1 {
				t.Fatalf("the dead fork's stage: %v", ents)
			}
			startServe(t, home) // it collects what the dead one left
			if ents, _ := os.ReadDir(filepath.Join(home, "forks")); len(ents) != 0 {
				t.Fatalf("after gc, stages are left: %v", ents)
			}
			out, _, _ = runCLI(t, home, "", "records")
			children := []string{}
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[0], "sb-") && f[0] != id {
					children = append(children, f[0])
				}
			}
			switch point {
			case crash.ForkStaged:
				if len(children) != 0 {
					t.Fatalf("children named before the crash point: %v\n%s", children, out)
				}
			case crash.ForkNamed:
				if len(children) != 2 {
					t.Fatalf("%d children after gc, want 2:\n%s", len(children), out)
				}
				for _, c := range children {
					if _, e, code := runCLI(t, home, "", "resume", c); code != 0 {
						t.Fatalf("resume %s: %s", c, e)
					}
					if got, _, _ := runCLI(t, home, "", "exec", "-q", c, "--", "cat", "f"); got != "the state forked\n" {
						t.Fatalf("child %s: %q", c, got)
					}
				}
			}
			if _, e, code := runCLI(t, home, "", "resume", id); code != 0 {
				t.Fatalf("the parent, after the crash: %s", e)
			}
		})
	}
}
