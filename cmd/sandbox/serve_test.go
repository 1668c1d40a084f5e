package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/record"
)

// startServe starts `sandbox serve` for home and waits for its socket.
func startServe(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	return startServeWith(t, home, nil, args...)
}

// startServeWith is startServe with extra environment.
func startServeWith(t testing.TB, home string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	return startServeCmd(t, home, cliCmd(t, home, env, append([]string{"serve"}, args...)...))
}

// startServeCmd starts cmd, a `sandbox serve` of home's, and waits for
// its socket; the test's cleanup kills it.
func startServeCmd(t testing.TB, home string, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	// A socket a killed service left would pass for this one's.
	os.Remove(filepath.Join(home, client.SocketName))
	var log bytes.Buffer
	if cmd.Stderr != nil {
		cmd.Stderr = io.MultiWriter(&log, cmd.Stderr) // the test reads it too
	} else {
		cmd.Stderr = &log
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("serve's log:\n%s", log.String())
		}
		cleanHome(t, home)
	})
	switch waitServing(cmd, home) {
	case served:
		return cmd
	case endedFirst:
		t.Fatalf("serve ended before it served:\n%s", log.String())
	}
	t.Fatalf("serve did not start in %v:\n%s", serveStartLimit, log.String())
	return nil
}

// How a service's start went (waitServing).
const (
	served = iota
	endedFirst
	timedOut
)

// waitServing waits for home's socket to appear, however long a loaded
// machine takes to start cmd's service (a cluster's host joins first),
// or for cmd's process to end first, or for serveStartLimit.
func waitServing(cmd *exec.Cmd, home string) int {
	for deadline := time.Now().Add(serveStartLimit); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(home, client.SocketName)); err == nil {
			return served
		}
		if ended(cmd) {
			return endedFirst
		}
	}
	return timedOut
}

// serveStartLimit is how long a service may take to start in a test: a
// bound for a hang, not a measure of speed.
const serveStartLimit = 3 * time.Minute

// ended says whether cmd's process has ended, without reaping it (the
// test may still Wait for it).
func ended(cmd *exec.Cmd) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err == nil && info.Signo != 0
}

func runCLI(t testing.TB, home string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := cliCmd(t, home, nil, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, strings.NewReader(stdin)
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// The live-sandbox commands as a user runs them, through a service.
func TestServeAndLiveCommands(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	// No service: said, with what to do.
	if _, e, code := runCLI(t, home, "", "create"); code != 7 || !strings.Contains(e, "no sandbox service is running") || !strings.Contains(e, "sandbox serve") {
		t.Fatalf("create with no service: %d %s", code, e)
	}
	startServe(t, home)
	if fi, err := os.Stat(filepath.Join(home, client.SocketName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}
	out, e, code := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: %d %q %s", code, out, e)
	}
	if out, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo hi; echo err >&2; exit 3"); code != 3 || out != "hi\n" || e != "err\n" {
		t.Fatalf("exec: %d %q %q", code, out, e)
	}
	if out, _, code := runCLI(t, home, "piped in", "exec", "-q", id, "--", "cat"); code != 0 || out != "piped in" {
		t.Fatalf("exec with stdin: %d %q", code, out)
	}
	if _, e, code := runCLI(t, home, "", "exec", id, "--", "true"); code != 0 || !strings.Contains(e, "sandbox: run    b3:") || !strings.Contains(e, "sandbox: records "+home) ||
		!strings.Contains(e, "sandbox: tier   S1 Capability (required S1: ") || !strings.Contains(e, " estimated [") {
		t.Fatalf("exec's summary: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "exec", id, "--", "/no/such"); code != 127 {
		t.Fatalf("exec of a missing program: %d %s", code, e)
	}
	var sbs []client.Sandbox
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 || sbs[0].ID != id || sbs[0].Execs != 3 {
		t.Fatalf("ps: %v %s", err, out)
	}
	ws := sbs[0].Workspace
	local := filepath.Join(t.TempDir(), "local.txt")
	os.WriteFile(local, []byte("a file\n"), 0o600)
	if _, e, code := runCLI(t, home, "", "cp", local, id+":"+ws+"/in.txt"); code != 0 {
		t.Fatalf("cp in: %d %s", code, e)
	}
	if out, _, _ := runCLI(t, home, "", "exec", "-q", "-n", id, "--", "sh", "-c", "cat in.txt; echo out > out.txt"); out != "a file\n" {
		t.Fatalf("the exec did not see the copy: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	if _, e, code := runCLI(t, home, "", "cp", id+":"+ws+"/out.txt", back); code != 0 {
		t.Fatalf("cp out: %d %s", code, e)
	}
	if b, _ := os.ReadFile(back); string(b) != "out\n" {
		t.Fatalf("copied out %q", b)
	}
	if out, _, code := runCLI(t, home, "", "ls", id+":"+ws); code != 0 || !strings.Contains(out, "in.txt") || !strings.Contains(out, "out.txt") {
		t.Fatalf("ls: %d %s", code, out)
	}
	if _, e, code := runCLI(t, home, "", "cp", local, id+":/etc/x"); code != 6 || !strings.Contains(e, "none of sandbox") {
		t.Fatalf("cp outside the grants: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "exec", "sb-000000000000", "--", "true"); code != 125 || !strings.Contains(e, "no such sandbox") {
		t.Fatalf("exec in no sandbox: %d %s", code, e)
	}
	// The execs are sealed runs of this state directory.
	out, _, _ = runCLI(t, home, "", "runs")
	if strings.Count(out, "\n") != 4 {
		t.Fatalf("runs:\n%s", out)
	}
	if _, e, code := runCLI(t, home, "", "rm", id); code != 0 {
		t.Fatalf("rm: %d %s", code, e)
	}
	if out, _, _ := runCLI(t, home, "", "ps"); strings.Contains(out, id) {
		t.Fatalf("ps after rm:\n%s", out)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace after rm: %v", err)
	}
}

// On SIGTERM the service lets an exec finish for its grace, then ends
// it and seals it, ends its sandboxes, removes its socket and exits 0.
func TestServeShutdownSealsWhatRuns(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home, "--grace", "500ms")
	out, _, _ := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	exe := cliCmd(t, home, nil, "exec", "-q", id, "--", "sh", "-c", "echo up; exec sleep 61")
	eo := &syncBuffer{}
	exe.Stdout = eo
	if err := exe.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !strings.Contains(eo.String(), "up"); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	srv.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- srv.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve exited: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
	err := exe.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("the interrupted exec's client: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, client.SocketName)); !os.IsNotExist(err) {
		t.Fatalf("socket left: %v", err)
	}
	out, _, _ = runCLI(t, home, "", "runs")
	if !strings.Contains(out, "killed") {
		t.Fatalf("the exec was not sealed:\n%s", out)
	}
	if left := waitGone("sleep 61"); len(left) > 0 {
		t.Fatalf("left running: %v", left)
	}
	if out, _, _ := runCLI(t, home, "", "gc", "-n"); !strings.Contains(out, "nothing left behind") {
		t.Fatalf("gc -n:\n%s", out)
	}
}

// syncBuffer is a buffer a process's output goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A service killed with -9 takes its sandboxes' processes with it; gc
// suspends its sandboxes from their workspaces, and removes the rest of
// what it left (run directories made ahead, cgroups, its lease).
func TestServeKilledLeavesNothing(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home)
	out, _, _ := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	var sbs []client.Sandbox
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 {
		t.Fatalf("ps: %v %s", err, out)
	}
	marker := fmt.Sprintf("sleep 3600.%d", os.Getpid()) // no other test's
	if _, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", marker+" >/dev/null 2>&1 & echo x > left.txt"); code != 0 {
		t.Fatalf("exec: %d %s", code, e)
	}
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	if left := waitGone(marker); len(left) > 0 {
		t.Fatalf("the sandbox's processes outlived the service: %v", left)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Join(os.TempDir(), "sandbox-parked-"+id)) })
	dry, _, _ := runCLI(t, home, "", "gc", "-n")
	if !strings.Contains(dry, "live sandbox of an ended process") || !strings.Contains(dry, id) {
		t.Fatalf("gc -n does not find the sandbox:\n%s", dry)
	}
	if out, e, code := runCLI(t, home, "", "gc"); code != 0 {
		t.Fatalf("gc: %d %s %s", code, out, e)
	}
	// Its workspace is not lost: the sandbox is suspended from it.
	if _, err := os.Stat(sbs[0].Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left where it was: %v", err)
	}
	if out, _, _ := runCLI(t, home, "", "records"); !strings.Contains(out, id+"  parked") {
		t.Fatalf("records after gc:\n%s", out)
	}
	if b := snapshotFile(t, home, id, "left.txt"); string(b) != "x\n" {
		t.Fatalf("the workspace's snapshot holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(os.TempDir(), "sandbox-parked-"+id)); !os.IsNotExist(err) {
		t.Fatalf("a copy of the workspace is kept beside its snapshot: %v", err)
	}
	if out, _, _ := runCLI(t, home, "", "gc", "-n"); !strings.Contains(out, "nothing left behind") {
		t.Fatalf("after gc:\n%s", out)
	}
	ents, _ := os.ReadDir(filepath.Join(home, "runs"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".partial") {
			t.Fatalf("left in runs/: %s", e.Name())
		}
	}
}

// snapshotFile is the file at rel in the workspace that sandbox id's
// record last captured, read from the store in home.
func snapshotFile(t *testing.T, home, id, rel string) []byte {
	t.Helper()
	f, err := record.Open(filepath.Join(home, "records", id+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := store.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	last := f.State().Last
	if last == nil {
		t.Fatal("no snapshot in the record")
	}
	tr, err := tree.Load(st, last.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tr.Entries {
		if e.Path != rel {
			continue
		}
		var b []byte
		for _, c := range e.Chunks {
			cb, err := st.Blob(c)
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, cb...)
		}
		return b
	}
	return nil
}

// servedRuns is how many runs the service in home has sealed, from its
// /metrics.
func servedRuns(t *testing.T, home string) int {
	t.Helper()
	return servedMetric(t, home, "sandbox_runs_total{")
}

// servedMetric sums the service's /metrics lines that begin with prefix.
func servedMetric(t *testing.T, home, prefix string) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(home, client.SocketName))
	}}}
	resp, err := hc.Get("http://sandbox/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			var k int
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &k)
			n += k
		}
	}
	return n
}

// With a service running, run is made by it: the same output, exit
// statuses and summary as in-process, stdin streamed, Ctrl-C and a
// closed pipe handled alike; --local, --inject and a socket nothing
// serves on run in-process.
func TestRunThroughService(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home)
	if out, e, code := runCLI(t, home, "piped in", "run", "-q", "--", "cat"); code != 0 || out != "piped in" || e != "" {
		t.Fatalf("run through the service: %d %q %q", code, out, e)
	}
	if _, e, code := runCLI(t, home, "", "run", "--", "sh", "-c", "exit 3"); code != 3 || !strings.Contains(e, "sandbox: run    b3:") || !strings.Contains(e, "sandbox: records "+home+"/runs/") {
		t.Fatalf("exit status and summary: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "run", "-q", "--", "/no/such"); code != 127 || !strings.Contains(e, "no such file") {
		t.Fatalf("a missing program: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "run", "-q", "--deadline", "300ms", "--", "sleep", "5"); code != 124 || !strings.Contains(e, "deadline") {
		t.Fatalf("--deadline: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "run", "-q", "--pids", "1", "--", "true"); code != 125 || !strings.Contains(e, "--pids") {
		t.Fatalf("--pids 1: %d %s", code, e)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("granted\n"), 0o644)
	cmd := cliCmd(t, home, nil, "run", "-q", "--grant", "fs:.:ro", "--", "cat", "in.txt")
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil || string(out) != "granted\n" {
		t.Fatalf("a relative grant, resolved where run was started: %v %q", err, out)
	}
	jf := filepath.Join(t.TempDir(), "r.json")
	if _, e, code := runCLI(t, home, "", "run", "-q", "--json="+jf, "--", "true"); code != 0 {
		t.Fatalf("--json: %d %s", code, e)
	}
	var res client.Result
	if b, _ := os.ReadFile(jf); json.Unmarshal(b, &res) != nil || !res.Sealed || res.ExitFrom != "guest" {
		t.Fatalf("--json: %+v", res)
	}
	if _, e, code := runCLI(t, home, "", "verify", "--trust-host", res.Run); code != 0 {
		t.Fatalf("verify %s: %d %s", res.Run, code, e)
	}
	if n := servedRuns(t, home); n != 5 {
		t.Fatalf("the service sealed %d runs; want 5 (a missing program and --pids 1 are refused before a run)", n)
	}

	// Stdin streams: the program's answer to the first line comes back
	// before the second is written.
	cmd = cliCmd(t, home, nil, "run", "-q", "--", "sh", "-c", `read a; echo "got $a"; read b; echo "got $b"`)
	in, _ := cmd.StdinPipe()
	outR, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(outR)
	io.WriteString(in, "one\n")
	if l, err := br.ReadString('\n'); err != nil || l != "got one\n" {
		t.Fatalf("first answer: %q %v", l, err)
	}
	io.WriteString(in, "two\n")
	in.Close()
	if l, _ := br.ReadString('\n'); l != "got two\n" {
		t.Fatalf("second answer: %q", l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	// Ctrl-C: interrupted there, summed up here, 130.
	cmd = cliCmd(t, home, nil, "run", "--", "sh", "-c", "echo up; exec sleep 62")
	var e bytes.Buffer
	cmd.Stderr = &e
	outR, _ = cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(outR).ReadString('\n'); l != "up\n" {
		t.Fatalf("%q", l)
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); exitCode(err) != 130 || !strings.Contains(e.String(), "sandbox: ended  killed (interrupted)") || !strings.Contains(e.String(), "sandbox: records ") {
		t.Fatalf("Ctrl-C: %v\n%s", err, e.String())
	}
	if l := waitGone("sleep 62"); len(l) > 0 {
		t.Fatalf("left running: %v", l)
	}

	// A closed pipe: 141, as in-process.
	cmd = cliCmd(t, home, nil, "run", "-q", "--", "yes")
	outR, _ = cmd.StdoutPipe()
	cmd.Start()
	bufio.NewReader(outR).ReadString('\n')
	outR.Close()
	if err := cmd.Wait(); exitCode(err) != 141 {
		t.Fatalf("closed pipe: %v", err)
	}
	before := servedRuns(t, home)

	// --local runs here; so does a run with --inject.
	if _, e, code := runCLI(t, home, "", "run", "-q", "--local", "--", "true"); code != 0 {
		t.Fatalf("--local: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "run", "-q", "--grant", "net:example.com:443", "--inject", "example.com:X-Key=env:HOME", "--", "true"); code != 0 {
		t.Fatalf("--inject: %d %s", code, e)
	}
	if n := servedRuns(t, home); n != before {
		t.Fatalf("--local or --inject went through the service: %d runs, were %d", n, before)
	}
	// A socket nothing serves on: in-process. $SANDBOX_HOST must answer.
	srv.Process.Kill()
	srv.Wait()
	if out, e, code := runCLI(t, home, "still", "run", "-q", "--", "cat"); code != 0 || out != "still" {
		t.Fatalf("with a dead service's socket: %d %q %s", code, out, e)
	}
	cmd = cliCmd(t, home, []string{"SANDBOX_HOST=" + filepath.Join(home, client.SocketName)}, "run", "-q", "--", "true")
	if b, err := cmd.CombinedOutput(); exitCode(err) != 125 || !strings.Contains(string(b), "no sandbox service is running") {
		t.Fatalf("$SANDBOX_HOST with no service: %v %s", err, b)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// A live sandbox is a durable run: suspended, it outlives the service
// that ran it (kill -9), and a new service resumes it from its record.
func TestSuspendResumeThroughTheService(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home)
	out, e, code := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo kept > notes.txt"); code != 0 {
		t.Fatalf("exec: %d %s", code, e)
	}
	if out, e, code := runCLI(t, home, "", "suspend", id); code != 0 || !strings.Contains(out, id+" suspended: workspace b3:") {
		t.Fatalf("suspend: %d %s %s", code, out, e)
	}
	if _, e, code := runCLI(t, home, "", "exec", id, "--", "true"); code != 125 || !strings.Contains(e, "is suspended: resume it first") {
		t.Fatalf("exec while suspended: %d %s", code, e)
	}
	// The service goes, the way a machine does.
	srv.Process.Kill()
	srv.Wait()
	startServe(t, home)
	if out, _, _ := runCLI(t, home, "", "records"); !strings.Contains(out, id+"  parked") {
		t.Fatalf("records:\n%s", out)
	}
	if out, e, code := runCLI(t, home, "", "resume", id); code != 0 || !strings.Contains(out, id+" resumed") {
		t.Fatalf("resume by a new service: %d %s %s", code, out, e)
	}
	if out, _, code := runCLI(t, home, "", "exec", "-q", id, "--", "cat", "notes.txt"); code != 0 || out != "kept\n" {
		t.Fatalf("the workspace after resume: %d %q", code, out)
	}
	if _, e, code := runCLI(t, home, "", "close", id); code != 0 {
		t.Fatalf("close: %d %s", code, e)
	}
	if out, e, code := runCLI(t, home, "", "record", "verify", id); code != 0 || !strings.Contains(out, "closed, 5 segments (2 executed)") {
		t.Fatalf("record verify: %d %s %s", code, out, e)
	}
	if _, e, code := runCLI(t, home, "", "resume", id); code != 2 || !strings.Contains(e, "not parked") {
		t.Fatalf("resume after close: %d %s", code, e)
	}
	rec := filepath.Join(home, "records", id+".jsonl")
	b, _ := os.ReadFile(rec)
	lines := strings.SplitAfter(string(b), "\n")
	tampered := filepath.Join(t.TempDir(), "r.jsonl")
	os.WriteFile(tampered, []byte(strings.Join(append(lines[:2], lines[3:]...), "")), 0o600)
	if out, _, code := runCLI(t, home, "", "record", "verify", tampered); code != 4 || !strings.Contains(out, "FAIL  record") || !strings.Contains(out, "phase") {
		t.Fatalf("a record with its suspension dropped: %d %s", code, out)
	}
}

// export and import as a user runs them: a bundle from one state
// directory resumes in another, whose record then verifies only with
// both hosts' keys trusted.
func TestExportImportAcrossStateDirs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	a, b := t.TempDir(), t.TempDir()
	startServe(t, a)
	out, _, _ := runCLI(t, a, "", "create")
	id := strings.TrimSpace(out)
	runCLI(t, a, "", "exec", "-q", id, "--", "sh", "-c", "echo carried > f")
	if _, e, code := runCLI(t, a, "", "export", id); code != 2 || !strings.Contains(e, "suspend it") {
		t.Fatalf("export of a live sandbox: %d %s", code, e)
	}
	runCLI(t, a, "", "suspend", id)
	bundle := filepath.Join(t.TempDir(), "b.tar")
	if _, e, code := runCLI(t, a, "", "export", id, "-o", bundle); code != 0 || strings.Contains(e, "sandbox: export") {
		t.Fatalf("export (progress is for a terminal, not a pipe): %d %s", code, e)
	}
	// On a terminal, progress: the bytes written and their rate; the
	// bundle is the same.
	again := filepath.Join(t.TempDir(), "b2.tar")
	if _, shown, code := runOnTerminal(t, a, "export", id, "-o", again); code != 0 || !strings.Contains(shown, "\rsandbox: export "+id+" ") || !strings.Contains(shown, "/s") {
		t.Fatalf("export on a terminal: %d %q", code, shown)
	}
	if b1, b2 := mustRead(t, bundle), mustRead(t, again); !bytes.Equal(b1, b2) {
		t.Fatalf("the bundle written on a terminal differs: %d bytes, %d", len(b1), len(b2))
	}
	junk := filepath.Join(t.TempDir(), "junk.tar")
	os.WriteFile(junk, []byte("not a tar"), 0o600)
	if _, e, code := runCLI(t, b, "", "import", junk); code != 4 {
		t.Fatalf("import of junk: %d %s", code, e)
	}
	// Its entries are sealed by A: B takes them only with A's key trusted.
	if _, e, code := runCLI(t, b, "", "import", bundle); code != 5 || !strings.Contains(e, "untrusted-key") && !strings.Contains(e, "not trusted") {
		t.Fatalf("import without A's key trusted: %d %s", code, e)
	}
	if out, shown, code := runOnTerminal(t, b, "import", "--trust", filepath.Join(a, "host.pub"), bundle); code != 0 || !strings.Contains(out, id+" imported: parked") || !strings.Contains(shown, "sandbox: import ") || !strings.Contains(shown, "(100%)") {
		t.Fatalf("import on a terminal: %d %s %q", code, out, shown)
	}
	startServe(t, b)
	if _, e, code := runCLI(t, b, "", "resume", id); code != 0 {
		t.Fatalf("resume on B: %d %s", code, e)
	}
	if out, _, _ := runCLI(t, b, "", "exec", "-q", id, "--", "cat", "f"); out != "carried\n" {
		t.Fatalf("on B: %q", out)
	}
	runCLI(t, b, "", "close", id)
	if _, _, code := runCLI(t, b, "", "record", "verify", "--runs", "--trust-host", id); code != 5 {
		t.Fatalf("with only B's key trusted: %d", code)
	}
	if out, e, code := runCLI(t, b, "", "record", "verify", "--runs", "--trust-host", "--trust", filepath.Join(a, "host.pub"), id); code != 0 {
		t.Fatalf("with both keys: %d %s %s", code, out, e)
	}
}

// startServeEnv is startServe with extra environment (a crash point).
func startServeEnv(t *testing.T, home string, env []string) *exec.Cmd {
	t.Helper()
	return startServeWith(t, home, env)
}

// kill -9 of the service at every step of a suspension and a
// resumption, and while a sandbox is simply live: the next service
// makes its record whole (suspended from the workspace as it was left),
// and a resumption finds every write an exec acknowledged.
func TestDurableKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	for _, point := range append([]string{"live"}, crash.DurablePoints...) {
		t.Run(point, func(t *testing.T) {
			home := t.TempDir()
			srv := startServeEnv(t, home, []string{crash.Env + "=" + point})
			out, e, code := runCLI(t, home, "", "create")
			id := strings.TrimSpace(out)
			if code != 0 {
				t.Fatalf("create: %s", e)
			}
			if _, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo acknowledged > f; (sleep 301 &)"); code != 0 {
				t.Fatalf("exec: %s", e)
			}
			switch {
			case point == "live":
				srv.Process.Kill()
			case strings.HasPrefix(point, "suspend"):
				if _, _, code := runCLI(t, home, "", "suspend", id); code == 0 {
					t.Fatal("the service did not die at " + point)
				}
			default:
				if _, e, code := runCLI(t, home, "", "suspend", id); code != 0 {
					t.Fatalf("suspend: %s", e)
				}
				if _, _, code := runCLI(t, home, "", "resume", id); code == 0 {
					t.Fatal("the service did not die at " + point)
				}
			}
			srv.Wait()
			// The next service collects what this one left first: a
			// frozen sandbox's processes too.
			startServe(t, home)
			if l := waitGone("sleep 301"); len(l) > 0 {
				t.Fatalf("the dead service's sandbox runs on: %v", l)
			}
			if out, _, _ := runCLI(t, home, "", "records"); !strings.Contains(out, id+"  parked") {
				t.Fatalf("after the crash at %s, records:\n%s", point, out)
			}
			if _, e, code := runCLI(t, home, "", "resume", id); code != 0 {
				t.Fatalf("resume after the crash at %s: %s", point, e)
			}
			if out, _, _ := runCLI(t, home, "", "exec", "-q", id, "--", "cat", "f"); out != "acknowledged\n" {
				t.Fatalf("after the crash at %s: %q", point, out)
			}
			if out, e, code := runCLI(t, home, "", "record", "verify", "--runs", "--trust-host", id); code != 0 {
				t.Fatalf("record verify: %s %s", out, e)
			}
		})
	}
}

// A service that stops (SIGTERM) suspends its live sandboxes instead of
// ending them: the next one resumes them with their workspaces.
func TestServeStopSuspendsSandboxes(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home)
	out, _, _ := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo unsaved work > w")
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve on SIGTERM: %v", err)
	}
	if out, _, _ := runCLI(t, home, "", "records"); !strings.Contains(out, id+"  parked") {
		t.Fatalf("records after a stop:\n%s", out)
	}
	startServe(t, home)
	if _, e, code := runCLI(t, home, "", "resume", id); code != 0 {
		t.Fatalf("resume: %s", e)
	}
	if out, _, _ := runCLI(t, home, "", "exec", "-q", id, "--", "cat", "w"); out != "unsaved work\n" {
		t.Fatalf("%q", out)
	}
}

// cleanHome collects what a killed service left for home (its live
// sandboxes are suspended by it) and removes the workspaces kept beside
// it, which live in the shared temporary directory.
func cleanHome(t testing.TB, home string) {
	cliCmd(t, home, nil, "gc").Run()
	ents, _ := os.ReadDir(filepath.Join(home, "records"))
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok {
			os.RemoveAll(filepath.Join(os.TempDir(), "sandbox-parked-"+id))
		}
	}
}

// ps shows a suspended sandbox as such, and rm closes its record.
func TestPsAndRmOfASuspendedSandbox(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	out, _, _ := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	runCLI(t, home, "", "suspend", id)
	var sbs []client.Sandbox
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 || sbs[0].State != "suspended" {
		t.Fatalf("ps: %v %s", err, out)
	}
	if _, e, code := runCLI(t, home, "", "rm", id); code != 0 {
		t.Fatalf("rm of a suspended sandbox: %s", e)
	}
	if out, _, _ := runCLI(t, home, "", "record", "verify", id); !strings.Contains(out, "closed") {
		t.Fatalf("after rm: %s", out)
	}
	if out, _, _ := runCLI(t, home, "", "ps"); strings.Contains(out, id) {
		t.Fatalf("ps after rm:\n%s", out)
	}
}

// startTicker creates an S2 sandbox (with extra create arguments) and
// starts, in the background, an exec of the ticker guest writing n lines
// into its workspace; it returns once the exec has printed a line.
func startTicker(t *testing.T, home string, n string, extra ...string) (string, *exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	out, e, code := runCLI(t, home, "", append([]string{"create", "--tier", "S2"}, extra...)...)
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	var sbs []client.Sandbox
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 {
		t.Fatalf("ps: %v %s", err, out)
	}
	ex := cliCmd(t, home, nil, "exec", "-q", id, "--", guestPath(t, "ticker"), n, sbs[0].Workspace+"/ticks.txt")
	exOut, exErr := &syncBuffer{}, &syncBuffer{}
	ex.Stdout, ex.Stderr = exOut, exErr
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(exOut.String(), "\n"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the exec printed nothing: %s", exErr.String())
		}
	}
	return id, ex, exOut, exErr
}

// A service that stops parks the execs its S2 sandboxes are running; a
// later service's resume continues each where it stopped and seals it as
// one run, whose output is what the exec printed before it was parked
// and what resume printed after.
func TestServeStopParksS2Execs(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	srv := startServe(t, home, "--grace", "100ms")
	id, ex, exOut, exErr := startTicker(t, home, "15000", "--grant", "clock")
	srv.Process.Signal(syscall.SIGTERM)
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve on SIGTERM: %v", err)
	}
	if code := exitCode(ex.Wait()); code != 125 || !strings.Contains(exErr.String(), "was parked after") {
		t.Fatalf("the parked exec: %d %s", code, exErr.String())
	}
	parked := exOut.String()
	if strings.Contains(parked, "file ") {
		t.Fatal("the exec ended before the service stopped: nothing was parked")
	}
	startServe(t, home)
	out, e, code := runCLI(t, home, "", "resume", id)
	first, rest, _ := strings.Cut(out, "\n")
	if code != 0 || !strings.Contains(first, id+" resumed") || !strings.Contains(e, "exec #1 continued and sealed: run b3:") || !strings.Contains(e, "exited 0") {
		t.Fatalf("resume: %d %s %s", code, first, e)
	}
	run := e[strings.Index(e, "run b3:")+len("run b3:"):]
	run = run[:64]
	all, err := os.ReadFile(filepath.Join(home, "runs", run, "stdout.log"))
	if err != nil || string(all) != parked+rest || !strings.Contains(rest, "file ") {
		t.Fatalf("the run's output (%d bytes, %v) is not the parked part (%d) and the continued part (%d)", len(all), err, len(parked), len(rest))
	}
	if out, e, code := runCLI(t, home, "", "replay", "b3:"+run); code != 0 || !strings.Contains(out, "matches") {
		t.Fatalf("replay of the continued run: %d %s %s", code, out, e)
	}
	runCLI(t, home, "", "close", id)
	if out, e, code := runCLI(t, home, "", "record", "verify", id, "--runs", "--trust-host"); code != 0 || !strings.Contains(out, "closed, 4 segments (1 executed)") {
		t.Fatalf("record verify: %d %s %s", code, out, e)
	}
}

// A service killed after a suspension parked an S2 exec and stored it,
// before Suspended was appended: the next service suspends the sandbox
// with the park, and resume continues the exec.
func TestS2ParkSurvivesAKilledService(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	srv := startServeEnv(t, home, []string{crash.Env + "=" + crash.SuspendCaptured})
	id, ex, exOut, _ := startTicker(t, home, "15000")
	if _, _, code := runCLI(t, home, "", "suspend", id); code == 0 {
		t.Fatal("the service did not die at " + crash.SuspendCaptured)
	}
	srv.Wait()
	ex.Wait()
	if strings.Contains(exOut.String(), "file ") {
		t.Fatal("the exec ended before the suspension: nothing was parked")
	}
	startServe(t, home)
	if out, _, _ := runCLI(t, home, "", "records"); !strings.Contains(out, id+"  parked") {
		t.Fatalf("records:\n%s", out)
	}
	out, e, code := runCLI(t, home, "", "resume", id)
	if code != 0 || !strings.Contains(e, "exec #1 continued and sealed") || !strings.Contains(out, "file ") {
		t.Fatalf("resume: %d %s %s", code, out, e)
	}
	runCLI(t, home, "", "close", id)
	if out, e, code := runCLI(t, home, "", "record", "verify", id, "--runs", "--trust-host"); code != 0 || !strings.Contains(out, "(1 executed)") {
		t.Fatalf("record verify: %d %s %s", code, out, e)
	}
}

// A service killed while a suspension's objects are staged (written,
// not yet synced or in the store) leaves nothing a record names: the
// next service suspends the sandbox from its workspace as it was left,
// its staging directory is collected, and the sandbox resumes whole.
func TestSuspendKilledWhileItsObjectsAreStaged(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	srv := startServeEnv(t, home, []string{crash.Env + "=" + crash.SuspendStaged})
	out, e, code := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	var sbs []client.Sandbox
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 {
		t.Fatalf("ps: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(sbs[0].Workspace, "note.txt"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code := runCLI(t, home, "", "suspend", id); code == 0 {
		t.Fatal("the service did not die at " + crash.SuspendStaged)
	}
	srv.Wait()
	staged, _ := filepath.Glob(filepath.Join(home, store.StagingDir, "batch-*"))
	if len(staged) != 1 {
		t.Fatalf("staging directories left by the killed service: %v", staged)
	}
	startServe(t, home)
	if _, err := os.Stat(staged[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staged objects of the killed suspension are still there: %v", err)
	}
	if out, e, code := runCLI(t, home, "", "resume", id); code != 0 {
		t.Fatalf("resume: %d %s %s", code, out, e)
	}
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 {
		t.Fatalf("ps: %v %s", err, out)
	}
	if out, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "cat", sbs[0].Workspace+"/note.txt"); code != 0 || out != "kept\n" {
		t.Fatalf("the workspace after resuming: %d %q %s", code, out, e)
	}
	runCLI(t, home, "", "close", id)
	if out, e, code := runCLI(t, home, "", "record", "verify", id, "--trust-host"); code != 0 || !strings.Contains(out, "closed") {
		t.Fatalf("record verify: %d %s %s", code, out, e)
	}
}
