package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/crash"
)

// cli starts the test binary as the sandbox CLI in a process of its own
// (its own session, as a detached job would be), with extra environment.
//
// A command told to crash (crash.Env) may leave what a killed sandbox
// leaves: at the test's end, gc collects it, and the test fails if a
// cgroup of one of home's leases is still there (none may outlive the
// test on the machine).
func cliCmd(t testing.TB, home string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--home", home}, args...)...)
	cmd.Env = append(append(os.Environ(), cliEnv+"=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, crash.Env+"=") }) {
		t.Cleanup(func() { collectCrashed(t, home) })
	}
	return cmd
}

// collectCrashed runs gc in home and fails t if a cgroup named for one
// of home's leases is left (cgroup.Parent's groups, in every hierarchy).
func collectCrashed(t testing.TB, home string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(home, "leases"))
	var leases []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
			leases = append(leases, id)
		}
	}
	gc := exec.Command(os.Args[0], "--home", home, "gc")
	gc.Env = append(os.Environ(), cliEnv+"=1")
	if out, err := gc.CombinedOutput(); err != nil {
		t.Errorf("gc after a crash: %v\n%s", err, out)
	}
	for _, id := range leases {
		left, _ := filepath.Glob("/sys/fs/cgroup/*/sandbox/partial-" + id + "-*")
		more, _ := filepath.Glob("/sys/fs/cgroup/sandbox/partial-" + id + "-*")
		if left = append(left, more...); len(left) > 0 {
			t.Errorf("a crashed run's cgroups outlive gc: %v", left)
		}
	}
}

// processesWith lists the processes whose command line starts with s
// (sandbox's own, which holds the guest's as arguments, does not).
func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// killLeft kills the processes whose command line starts with s: what a
// failed test left running.
func killLeft(s string) {
	for _, p := range processesWith(s) {
		if pid, err := strconv.Atoi(p[:strings.IndexByte(p, ':')]); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// waitGone waits for every process whose command line starts with s to
// end, and returns those still there after 30 s: a bound on a busy
// machine, not a measure, and shorter than any sleep the tests leave
// behind (61 s and more), so that one not killed is found.
func waitGone(s string) []string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ps := processesWith(s)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKilledAtEveryStep: sandbox killed (SIGKILL) at each step of a run,
// or hung up on (SIGHUP) while the guest runs and while it seals, ends
// every process of the run, at S1 and S2; what it leaves is found by its
// dead lease, listed by doctor and gc -n, removed by gc (and by the next
// run), and no half-written run is ever listed as a run.
func TestKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs with cgroups, which this checks, need root")
	}
	type tcase struct {
		tier, point, sig string
	}
	var cases []tcase
	for _, tierName := range []string{"S1", "S2"} {
		for _, p := range crash.Points {
			if p == crash.Init && tierName == "S2" {
				continue
			}
			cases = append(cases, tcase{tierName, p, "KILL"})
		}
		cases = append(cases, tcase{tierName, crash.Started, "HUP"}, tcase{tierName, crash.Sealing, "HUP"})
	}
	cases = append(cases, tcase{"S1", "running", "KILL"})
	hello := guestPath(t, "hello")
	for i, c := range cases {
		t.Run(c.tier+"/"+c.point+"/"+c.sig, func(t *testing.T) {
			t.Parallel() // each case has its own state directory and marker
			home := t.TempDir()
			// A sleep no other process has. Where sandbox is stopped while
			// the guest runs (or before it starts), long enough that one
			// left running is found by waitGone (a test that fails kills
			// it); where it is stopped after the guest ended, short.
			secs := 600
			if !slices.Contains([]string{crash.Probed, crash.Partial, crash.Init, crash.Started, "running"}, c.point) {
				secs = 1
			}
			marker := fmt.Sprintf("%d.%d%02d9", secs, os.Getpid(), i) // of one length: none a prefix of another
			t.Cleanup(func() { killLeft("sleep " + marker) })
			args := []string{"run", "-q", "--deadline", "30s", "--", "/bin/sh", "-c", "sleep " + marker}
			if c.tier == "S2" {
				args = []string{"run", "-q", "--", hello}
			}
			cmd := cliCmd(t, home, []string{crash.Env + "=" + c.point + ":" + c.sig}, args...)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			killWhenRunning(t, cmd, c.point, "sleep "+marker)
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if c.sig == "KILL" && (!ws.Signaled() || ws.Signal() != syscall.SIGKILL) {
				t.Fatalf("not killed at %s: %v\n%s", c.point, cmd.ProcessState, out.String())
			}
			if c.tier == "S1" {
				if left := waitGone("sleep " + marker); len(left) > 0 {
					t.Fatalf("the run outlived sandbox: %v", left)
				}
			}
			runs, _, _ := sandbox(t, home, "runs")
			// Renamed: in place, its index row still pending (listed);
			// Indexed: a pending row, not in place (not listed).
			sealed := c.point == crash.Sealed || c.point == crash.Renamed || c.sig == "HUP"
			if strings.Contains(runs, "partial") || sealed != (strings.TrimSpace(runs) != "" && !strings.Contains(runs, "no runs")) {
				t.Errorf("runs after a crash at %s:\n%s", c.point, runs)
			}
			dry, _, _ := sandbox(t, home, "gc", "-n")
			writing := c.sig == "KILL" && c.point != crash.Probed && c.point != crash.Sealed && c.point != crash.Renamed // "running" too
			if c.sig == "KILL" && !strings.Contains(dry, "would remove lease") || writing != strings.Contains(dry, "run being written") {
				t.Errorf("gc -n after a crash at %s:\n%s", c.point, dry)
			}
			leftBehind := writing
			if doc, _, _ := sandbox(t, home, "doctor"); leftBehind && !strings.Contains(doc, "ended    run being written") {
				t.Errorf("doctor does not list the leftover:\n%s", doc)
			}
			gcOut, gcErr, code := sandbox(t, home, "gc")
			if code != 0 {
				t.Fatalf("gc: %d %s %s", code, gcOut, gcErr)
			}
			after, _, _ := sandbox(t, home, "gc", "-n")
			if strings.Contains(after, "would remove") || strings.Contains(after, "FAILED") {
				t.Errorf("gc left:\n%s\nafter removing:\n%s", after, gcOut)
			}
			for _, sub := range []string{"runs", "roots", "leases"} {
				ents, _ := os.ReadDir(filepath.Join(home, sub))
				for _, e := range ents {
					if strings.Contains(e.Name(), "partial") || strings.HasPrefix(e.Name(), "run-") || strings.HasSuffix(e.Name(), ".lock") {
						t.Errorf("left in %s: %s", sub, e.Name())
					}
				}
			}
		})
	}
}

// killWhenRunning runs cmd to its end; at the point "running" (no crash
// point: a real kill -9 from outside) it waits until a process whose
// command line holds marker exists, then kills cmd.
func killWhenRunning(t *testing.T, cmd *exec.Cmd, point, marker string) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if point == "running" {
		deadline := time.Now().Add(2 * time.Minute) // a bound on a busy machine, not a measure
		for len(processesWith(marker)) == 0 {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("the guest never started")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Kill()
	}
	cmd.Wait()
}

// TestNextRunCollects: the run after a killed one removes what it left.
func TestNextRunCollects(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs with cgroups need root")
	}
	home := t.TempDir()
	cmd := cliCmd(t, home, []string{crash.Env + "=" + crash.Ended}, "run", "-q", "--", "/bin/true")
	cmd.Run()
	if dry, _, _ := sandbox(t, home, "gc", "-n"); !strings.Contains(dry, "would remove run being written") {
		t.Fatalf("nothing left to collect:\n%s", dry)
	}
	_, errOut, code := sandbox(t, home, "run", "--", "/bin/true")
	if code != 0 || !strings.Contains(errOut, "removed") {
		t.Fatalf("next run: %d %s", code, errOut)
	}
	if dry, _, _ := sandbox(t, home, "gc", "-n"); dry != "nothing left behind\n" {
		t.Fatalf("after the next run:\n%s", dry)
	}
}

// TestClosedPipeEndsTheRun: `sandbox run … | head -1`: once the reader
// is gone, the whole run ends, at S1 and S2; the run is sealed (its
// outcome says why it ended) and sandbox exits 141 (128+SIGPIPE).
func TestClosedPipeEndsTheRun(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs with cgroups need root")
	}
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "big"), []byte(strings.Repeat("pipe-line\n", 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("yes pipe-%d", os.Getpid())
	for _, tc := range []struct {
		tier string
		args []string
	}{
		{"S1", []string{"--", "/bin/sh", "-c", marker}},
		{"S2", []string{"--grant", "fs:" + data + ":ro", "--", guestPath(t, "cat"), filepath.Join(data, "big"), filepath.Join(data, "big")}},
	} {
		t.Run(tc.tier, func(t *testing.T) {
			home := t.TempDir()
			cmd := cliCmd(t, home, nil, append([]string{"run", "-q"}, tc.args...)...)
			r, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(r).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "pipe-") {
				t.Fatalf("first line %q %v", line, err)
			}
			r.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute): // a bound on a busy machine, not a measure
				cmd.Process.Kill()
				t.Fatal("sandbox did not end when its output was closed")
			}
			if left := waitGone(marker); len(left) > 0 {
				t.Fatalf("the run outlived sandbox: %v", left)
			}
			if code := cmd.ProcessState.ExitCode(); code != 141 {
				t.Errorf("exit %d, want 141", code)
			}
			out, _, code := sandbox(t, home, "verify", "--trust-host", "last")
			if code != 0 {
				t.Errorf("the run is not sealed: %d %s", code, out)
			}
			if shown, _, _ := sandbox(t, home, "show", "last"); !strings.Contains(shown, "closed pipe") {
				t.Errorf("show does not say why it ended:\n%s", shown)
			}
		})
	}
}

// TestRootlessKilledRunEnds: rootless, where init changes no user and the
// guest is the invoking user, a sandbox killed while its guest runs and
// while its init builds the root takes the whole run with it, and gc
// removes what it left.
func TestRootlessKilledRunEnds(t *testing.T) {
	r := newRootless(t)
	for i, point := range []string{crash.Init, crash.Started, "running"} {
		marker := fmt.Sprintf("600.%d%d7", os.Getpid(), i)
		t.Cleanup(func() { killLeft("sleep " + marker) })
		id := fmt.Sprint(rootlessUID)
		cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", r.bin, "--home", r.home,
			"run", "-q", "--deadline", "30s", "--", "/bin/sh", "-c", "sleep "+marker)
		cmd.Env = []string{cliEnv + "=1", "HOME=" + r.dir, "PATH=/usr/local/bin:/usr/bin:/bin", crash.Env + "=" + point}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		killWhenRunning(t, cmd, point, "sleep "+marker)
		if ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() {
			t.Fatalf("%s: not killed: %v", point, cmd.ProcessState)
		}
		if left := waitGone("sleep " + marker); len(left) > 0 {
			t.Fatalf("%s: the run outlived sandbox: %v", point, left)
		}
		if o, e, code := r.run(t, nil, "gc"); code != 0 || !strings.Contains(o, "removed") {
			t.Fatalf("%s: gc %d %s %s", point, code, o, e)
		}
		if o, _, _ := r.run(t, nil, "gc", "-n"); o != "nothing left behind\n" {
			t.Fatalf("%s: after gc:\n%s", point, o)
		}
	}
}

// TestGCLeavesOtherStateDirsAlone: gc in one state directory never
// touches what a sandbox using another one has running (its cgroup is
// named with a lease this state directory does not hold).
func TestGCLeavesOtherStateDirsAlone(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs with cgroups need root")
	}
	a, b := t.TempDir(), t.TempDir()
	marker := fmt.Sprintf("sleep 3.%d9", os.Getpid())
	cmd := cliCmd(t, a, nil, "run", "-q", "--", "/bin/sh", "-c", marker+"; echo done")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Slow under the race detector and a busy machine: wait long.
	for i := 0; i < 3000 && len(processesWith(marker)) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if len(processesWith(marker)) == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the run never started: %q", out.String())
	}
	if o, e, code := sandbox(t, b, "gc"); code != 0 || strings.Contains(o, "cgroup") {
		t.Errorf("gc of another state directory: %d %s %s", code, o, e)
	}
	if err := cmd.Wait(); err != nil || out.String() != "done\n" {
		t.Fatalf("the other run was touched: %v %q", err, out.String())
	}
}
