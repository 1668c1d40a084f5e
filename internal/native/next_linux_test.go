package native

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// TestAnExecStartsInTheLauncherStartedAhead: a live sandbox's init keeps
// a launcher started for its next exec, waiting in the sandbox's group;
// the exec's program is that very process, executed in place, in the
// exec's own group, in a cgroup namespace rooted there, as nobody mapped
// to the sandbox's host id, with the exec's streams. The launcher
// waiting is out of the guest's reach (a guest signals every pid it can
// name): it is still there for the next exec. One killed while it
// waited (here by the host) costs the exec nothing but the launcher it
// then starts; and a next one is started again.
func TestAnExecStartsInTheLauncherStartedAhead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root, a live sandbox's execs start through a launcher, in a user namespace of their own")
	}
	if s1init.ABI() < 6 {
		t.Skipf("Landlock ABI %d: below 6 no launcher is started ahead (nothing keeps a guest's signals from it)", s1init.ABI())
	}
	e := testExecutor(t)
	sg := newGroup(t)
	s, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, sg, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	leasedID(t, "the live sandbox", s.HostID())
	procs := filepath.Join(sg.V1["cpuacct"], "cgroup.procs")
	if sg.V2 != "" && sg.V1["cpuacct"] == "" {
		procs = filepath.Join(sg.V2, "cgroup.procs")
	}
	// waiting is the launcher waiting in the sandbox's group: its host
	// pid and the pid its sandbox knows it by. Not the one given.
	waiting := func(not int) (host, inside int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no launcher waiting in the sandbox's group within a minute")
			}
			b, err := os.ReadFile(procs)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				if pid == not || !bytes.HasPrefix(cmd, []byte("sandbox-s1-launch\x00")) {
					continue
				}
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				for _, l := range strings.Split(string(st), "\n") {
					if f := strings.Fields(l); len(f) == 3 && f[0] == "NSpid:" {
						inside, _ = strconv.Atoi(f[2])
						return pid, inside
					}
				}
			}
		}
	}
	exec := func(script string) (string, *executor.Result, *cgroup.Group) {
		t.Helper()
		xg := newGroup(t)
		var out bytes.Buffer
		res, err := s.Run(context.Background(), &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: "/bin/sh", Args: []string{"sh", "-c", script},
			Env: map[string]string{"PATH": "/usr/bin:/bin"}}, Stdout: &out, Stderr: io.Discard, Deadline: time.Minute, Cgroup: xg})
		if err != nil || res.Outcome.Status != attest.Exited || *res.Outcome.ExitCode != 0 {
			t.Fatalf("exec %q: %v %+v", script, err, res)
		}
		return out.String(), res, xg
	}
	host, inside := waiting(0)
	// A guest's attempt on every pid it can name but its own: signals,
	// limits (which the next exec's program would inherit) and priority.
	out, _, _ := exec(`for i in $(seq 1 300); do [ $i = $$ ] && continue; kill -9 $i 2>/dev/null && echo "killed $i"; kill -STOP $i 2>/dev/null && echo "stopped $i"; prlimit --pid $i --fsize=10:10 --cpu=1:1 --nofile=6:6 2>/dev/null && echo "limited $i"; renice -n 19 -p $i >/dev/null 2>&1 && echo "reniced $i"; done; ls /proc | grep -c '^[0-9]'; echo $$`)
	for _, what := range []string{"killed", "stopped", "limited", "reniced"} {
		if strings.Contains(out, what) {
			t.Fatalf("the guest %s a process not its own:\n%s", what, out)
		}
	}
	if f := strings.Fields(out); len(f) != 2 || f[1] != strconv.Itoa(inside) {
		t.Fatalf("the exec ran as pid %v in its sandbox, not in the launcher waiting there (pid %d)", f, inside)
	}
	// The next exec: in the launcher started after it, which the guest
	// above could not reach either.
	host2, inside2 := waiting(host)
	if err := syscall.Kill(host2, 0); err != nil {
		t.Fatalf("the next launcher: %v", err)
	}
	out, _, xg := exec(`echo $$; cat /proc/self/cgroup; cat /proc/self/uid_map; ls -l /proc/self/fd/0 /proc/self/fd/1 | sed 's/.*-> //'; echo "limits $(ulimit -f) $(ulimit -t) $(nice)"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != strconv.Itoa(inside2) {
		t.Fatalf("the exec ran as pid %s in its sandbox, not in the launcher waiting there (pid %d):\n%s", lines[0], inside2, out)
	}
	for _, l := range lines[1:] {
		if strings.Count(l, ":") == 2 && !strings.HasSuffix(l, ":/") {
			t.Errorf("the exec's cgroup namespace is not rooted at its groups: %q", l)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "65534 "+strconv.Itoa(s.HostID())+" 1") {
		t.Errorf("the exec's uid_map is not 65534 → %d alone:\n%s", s.HostID(), out)
	}
	if !strings.Contains(out, "limits unlimited unlimited 0") {
		t.Errorf("the exec's limits or priority are not its own:\n%s", out)
	}
	if !strings.Contains(out, "pipe:") {
		t.Errorf("the exec's streams are not the pipes it was given:\n%s", out)
	}
	if d, _, err := xg.CPU(); err != nil || d <= 0 {
		t.Errorf("the exec's own group counted %v of CPU (%v): the program did not run in it", d, err)
	}
	// One killed while it waits: the exec starts its own, and a next
	// one is started again.
	host3, _ := waiting(host2)
	if err := syscall.Kill(host3, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for syscall.Kill(host3, 0) == nil {
		time.Sleep(5 * time.Millisecond) // a zombie until the sandbox's init reaps it
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", host3)); strings.Contains(string(b), ") Z ") || len(b) == 0 {
			break
		}
	}
	if out, _, _ := exec(`echo ran`); out != "ran\n" {
		t.Fatalf("the exec after its launcher was killed: %q", out)
	}
	waiting(host3)
}
