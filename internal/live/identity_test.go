//go:build linux

package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/native"
)

// hostIDOf is the host uid a live sandbox's execs run as, from the
// uid_map an exec reads (65534 mapped alone).
func hostIDOf(t *testing.T, h *Manager, id string) int {
	t.Helper()
	_, out := execIn(t, h, id, "cat", "/proc/self/uid_map")
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != "65534" || f[2] != "1" {
		t.Fatalf("sandbox %s's uid_map: %q, want 65534 mapped alone", id, out)
	}
	n, _ := strconv.Atoi(f[1])
	if n < native.IDBase || n >= native.IDBase+native.IDCount {
		t.Fatalf("sandbox %s runs as host id %d, not one of S1's", id, n)
	}
	return n
}

// TestNoHostUserReachesASandboxWorkspace: a live S1 sandbox made by the
// host has a host id of its own; a host process running as nobody, or
// as another sandbox's host id, reaches none of its processes, nor its
// workspace through /proc/PID/root. Its files stay its own across a
// suspension, whose resumption may run it as another id: they belong to
// the workspace's owner, never to an id.
func TestNoHostUserReachesASandboxWorkspace(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	a, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Create(ctx, SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	idA, idB := hostIDOf(t, h, a.ID), hostIDOf(t, h, b.ID)
	if idA == idB {
		t.Fatalf("two live sandboxes share host id %d", idA)
	}
	argv := []string{"sleep", fmt.Sprintf("3600.%d", time.Now().UnixNano()%1e9)}
	execIn(t, h, a.ID, "sh", "-c", strings.Join(argv, " ")+" </dev/null >/dev/null 2>&1 & echo mine > mine")
	pid := waitProc(t, argv...)

	bin, err := guestbuild.Native("intruder")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "intruder-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	prog := filepath.Join(dir, "intruder")
	if data, err := os.ReadFile(bin); err != nil || os.WriteFile(prog, data, 0o755) != nil {
		t.Fatalf("copy the intruder: %v", err)
	}
	for _, who := range []struct {
		name string
		uid  int
	}{{"nobody", 65534}, {"another sandbox's host id", idB}} {
		cmd := exec.Command(prog, strconv.Itoa(pid), a.Workspace+"/intruder", "/tmp/intruder")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(who.uid), Gid: uint32(who.uid), Groups: []uint32{}}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("the intruder as %s: %v %s", who.name, err, out.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) < 20 || lines[0] != fmt.Sprintf("intruder uid %d gid %d", who.uid, who.uid) {
			t.Fatalf("the intruder as %s said:\n%s", who.name, out.String())
		}
		for _, l := range lines[1:] {
			if !strings.Contains(l, ": BLOCKED (") {
				t.Errorf("as %s: %s", who.name, l)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(a.Workspace, "intruder")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intruder wrote into the workspace: %v", err)
	}
	if st, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(idA) {
		t.Errorf("the sandbox's process did not come through as host id %d: %v", idA, err)
	}

	var ws syscall.Stat_t
	syscall.Stat(a.Workspace, &ws)
	var mine syscall.Stat_t
	if err := syscall.Stat(filepath.Join(a.Workspace, "mine"), &mine); err != nil || mine.Uid != ws.Uid || mine.Gid != ws.Gid {
		t.Fatalf("the guest's file: %v, owned by %d:%d on the host, not the workspace's owner %d:%d", err, mine.Uid, mine.Gid, ws.Uid, ws.Gid)
	}
	if _, err := h.Suspend(ctx, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Errorf("pid %d still runs after the suspension", pid)
	}
	if _, err := h.Resume(ctx, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	hostIDOf(t, h, a.ID)
	_, out := execIn(t, h, a.ID, "sh", "-c", "echo again >> mine && stat -c '%u %g' mine && cat mine")
	if out != "65534 65534\nmine\nagain\n" {
		t.Errorf("after the resumption, the guest's own file: %q", out)
	}
}

// waitProc waits for the host process whose command line is argv.
func waitProc(t *testing.T, argv ...string) int {
	t.Helper()
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Equal(b, want) {
					return pid
				}
			}
		}
	}
	t.Fatalf("no process %q appeared", argv)
	return 0
}
