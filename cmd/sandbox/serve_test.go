package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
)

// startServe starts `sandbox serve` for home and waits for its socket.
func startServe(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := cliCmd(t, home, nil, append([]string{"serve"}, args...)...)
	var log bytes.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("serve's log:\n%s", log.String())
		}
	})
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(filepath.Join(home, client.SocketName)); err == nil {
			return cmd
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("serve did not start:\n%s", log.String())
	return nil
}

func runCLI(t *testing.T, home string, stdin string, args ...string) (string, string, int) {
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
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	srv := startServe(t, home, "--grace", "500ms")
	out, _, _ := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	exe := cliCmd(t, home, nil, "exec", "-q", id, "--", "sh", "-c", "echo up; exec sleep 60")
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
	if left := waitGone("sleep 60", 5*time.Second); len(left) > 0 {
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

// A service killed with -9 takes its sandboxes' processes with it, and
// what it left (workspaces, run directories made ahead, cgroups, its
// lease) is found and removed by gc.
func TestServeKilledLeavesNothing(t *testing.T) {
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
	if _, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "sleep 3600 >/dev/null 2>&1 & echo x > left.txt"); code != 0 {
		t.Fatalf("exec: %d %s", code, e)
	}
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	if left := waitGone("sleep 3600", 5*time.Second); len(left) > 0 {
		t.Fatalf("the sandbox's processes outlived the service: %v", left)
	}
	dry, _, _ := runCLI(t, home, "", "gc", "-n")
	if !strings.Contains(dry, "live sandbox workspace") || !strings.Contains(dry, sbs[0].Workspace) {
		t.Fatalf("gc -n does not find the workspace:\n%s", dry)
	}
	if out, e, code := runCLI(t, home, "", "gc"); code != 0 {
		t.Fatalf("gc: %d %s %s", code, out, e)
	}
	if _, err := os.Stat(sbs[0].Workspace); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
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
