package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/crash"
)

// TestIdleServiceParksAndNeverErases: a service with --idle parks a
// sandbox no request touched (its workspace, .git included, kept), keeps
// one whose exec still runs, counts both in /metrics, and a resumption
// finds the work.
func TestIdleServiceParksAndNeverErases(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home, "--idle", "3s")
	out, e, code := runCLI(t, home, "", "create")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	idle := strings.TrimSpace(out)
	if _, e, code := runCLI(t, home, "", "exec", idle, "--", "sh", "-c", "mkdir .git && echo unpublished > .git/WIP"); code != 0 {
		t.Fatalf("exec: %s", e)
	}
	out, _, _ = runCLI(t, home, "", "create")
	busy := strings.TrimSpace(out)
	done := make(chan int, 1)
	go func() {
		_, _, code := runCLI(t, home, "", "exec", busy, "--", "sleep", "8")
		done <- code
	}()
	deadline := time.Now().Add(90 * time.Second)
	for servedMetric(t, home, "sandbox_idle_parked_total") < 1 || servedMetric(t, home, "sandbox_idle_retained_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("nothing parked and retained")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ps, _, _ := runCLI(t, home, "", "ps")
	var idleLine, busyLine string
	for _, l := range strings.Split(ps, "\n") {
		switch {
		case strings.HasPrefix(l, idle):
			idleLine = l
		case strings.HasPrefix(l, busy):
			busyLine = l
		}
	}
	if !strings.Contains(idleLine, "suspended") || !strings.Contains(busyLine, "live") {
		t.Fatalf("ps:\n%s", ps)
	}
	if c := <-done; c != 0 {
		t.Fatalf("the busy exec: %d", c)
	}
	if _, e, code := runCLI(t, home, "", "resume", idle); code != 0 {
		t.Fatalf("resume: %s", e)
	}
	if out, _, _ := runCLI(t, home, "", "exec", idle, "--", "cat", ".git/WIP"); out != "unpublished\n" {
		t.Fatalf("after resuming: %q", out)
	}
}

// TestSeedAndReceiptAsAUserRunsThem: a sandbox seeded from a local
// repository through its grant, bound to an owner claim; a retry is the
// first seed's answer; the receipt is unknown while nothing is
// checkpointed, present once the idle fence parked it, and refused for
// another owner; bad flags are usage errors.
func TestSeedAndReceiptAsAUserRunsThem(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (scripts/deps installs it)")
	}
	src := filepath.Join(t.TempDir(), "repo")
	git := func(args ...string) string {
		c := exec.Command("git", append([]string{"-C", src, "-c", "user.name=t", "-c", "user.email=t@e"}, args...)...)
		c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %s", args, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(src, 0o755)
	git("init", "-q", "-b", "fix+1")
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o644)
	git("add", ".")
	git("commit", "-qm", "one")
	head := git("rev-parse", "HEAD")

	home := t.TempDir()
	startServe(t, home, "--idle", "3s")
	out, e, code := runCLI(t, home, "", "create", "--grant", "fs:"+src+":ro")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	id := strings.TrimSpace(out)
	claim := []string{"--run", "r-1", "--requester", "alice", "--thread", "t-1", "--repository", "acme/w", "--head", head}
	seed := append([]string{"seed", id, "--source", src, "--ref", "fix+1", "--origin", "https://git.example.com/acme/w.git"}, claim...)
	out, e, code = runCLI(t, home, "", append(seed, "--json")...)
	var s struct{ State, Head, Incarnation string }
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.State != "bound" || s.Head != head {
		t.Fatalf("seed: %d %s %s", code, out, e)
	}
	if out, _, _ := runCLI(t, home, "", "exec", id, "--", "cat", "main.go"); out != "package main\n" {
		t.Fatalf("the checkout: %q", out)
	}
	if out, _, code := runCLI(t, home, "", seed...); code != 0 || !strings.Contains(out, "already seeded") {
		t.Fatalf("retry: %d %s", code, out)
	}
	rc := append([]string{"preservation", id, "--source", src, "--ref", "fix+1", "--incarnation", s.Incarnation, "--json"}, claim...)
	// Parked by the idle fence (3 s without a request), then present.
	deadline := time.Now().Add(90 * time.Second)
	for servedMetric(t, home, "sandbox_idle_parked_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("not parked")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, e, code = runCLI(t, home, "", rc...)
	if code != 0 || !strings.Contains(out, `"state": "present"`) || !strings.Contains(out, `"checkpoint": "b3:`) {
		t.Fatalf("receipt: %d %s %s", code, out, e)
	}
	if ps, _, _ := runCLI(t, home, "", "ps"); !strings.Contains(ps, "suspended") {
		t.Fatalf("the receipt woke it:\n%s", ps)
	}
	wrong := append([]string{"preservation", id, "--source", src, "--ref", "fix+1", "--incarnation", s.Incarnation}, claim...)
	wrong[len(wrong)-7] = "mallory" // --requester
	if out, e, code := runCLI(t, home, "", wrong...); code != 3 || strings.Contains(out+e, "b3:") {
		t.Fatalf("another owner: %d %s %s", code, out, e)
	}
	for _, bad := range [][]string{
		{"seed", id, "--source", src, "--ref", "a..b"},
		{"seed", id, "--source", src, "--ref", "main", "--run", "r"},
		{"preservation", id, "--source", src, "--ref", "main"},
	} {
		if _, e, code := runCLI(t, home, "", bad...); code != 2 {
			t.Errorf("%v: %d %s", bad, code, e)
		}
	}
}

// TestIdleRetainsWhenItsCheckpointFails: a checkpoint that cannot be
// stored (the state directory is full) never licenses anything: the
// idle sandbox is retained live, thawed, its files as they were.
func TestIdleRetainsWhenItsCheckpointFails(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := smallStateDir(t, 16<<20)
	startServe(t, home, "--idle", "3s")
	out, e, code := runCLI(t, home, "", "create")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	id := strings.TrimSpace(out)
	// More than the state directory holds, in the workspace (outside it).
	if _, e, code := runCLI(t, home, "", "exec", id, "--", "sh", "-c", "head -c 24000000 /dev/urandom > big && sha256sum big > big.sum"); code != 0 {
		t.Fatalf("exec: %s", e)
	}
	deadline := time.Now().Add(90 * time.Second)
	for servedMetric(t, home, "sandbox_idle_retained_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("never retained")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := servedMetric(t, home, "sandbox_idle_parked_total"); n != 0 {
		t.Fatalf("%d parked", n)
	}
	if out, e, code := runCLI(t, home, "", "exec", id, "--", "sha256sum", "-c", "big.sum"); code != 0 || !strings.Contains(out, "big: OK") {
		t.Fatalf("after the failed checkpoint: %d %s %s", code, out, e)
	}
}

// TestSeedKilledAfterItsMark: a service killed between a seed's mark
// and anything else leaves the sandbox's lifecycle record pending with
// the seed's operation reserved; the next service parks the sandbox, its
// resumption makes the operation lost (an obligation, its outcome
// unknown), a retry of the seed is refused, the idle fence retains it,
// and nothing of the workspace was touched.
func TestSeedKilledAfterItsMark(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (scripts/deps installs it)")
	}
	src := filepath.Join(t.TempDir(), "repo")
	os.MkdirAll(src, 0o755)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "one"}} {
		c := exec.Command("git", append([]string{"-C", src, "-c", "user.name=t", "-c", "user.email=t@e"}, args...)...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s", out)
		}
	}
	head, _ := exec.Command("git", "-C", src, "rev-parse", "HEAD").Output()
	home := t.TempDir()
	sv := startDoomedServe(t, home, crash.SeedMarked)
	out, e, code := runCLI(t, home, "", "create", "--grant", "fs:"+src+":ro")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	id := strings.TrimSpace(out)
	runCLI(t, home, "", "exec", id, "--", "sh", "-c", "echo mine > precious")
	seed := []string{"seed", id, "--source", src, "--ref", "main", "--run", "r", "--requester", "u", "--thread", "t", "--repository", "a/b", "--head", strings.TrimSpace(string(head))}
	if _, _, code := runCLI(t, home, "", seed...); code == 0 {
		t.Fatal("the seed went through a service killed at its mark")
	}
	sv.Wait()
	startServe(t, home, "--idle", "200ms")
	if _, e, code := runCLI(t, home, "", "resume", id); code != 0 {
		t.Fatalf("resume: %s", e)
	}
	b, _ := os.ReadFile(filepath.Join(home, "lifecycle", id+".json"))
	if !strings.Contains(string(b), `"state": "pending"`) || !strings.Contains(string(b), `"state": "lost"`) {
		t.Fatalf("the lifecycle record after the crash:\n%s", b)
	}
	if _, e, code := runCLI(t, home, "", seed...); code != 2 || !strings.Contains(e, "refused") {
		t.Fatalf("a retry: %d %s", code, e)
	}
	deadline := time.Now().Add(90 * time.Second)
	for servedMetric(t, home, "sandbox_idle_retained_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("never retained")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, _, _ := runCLI(t, home, "", "exec", id, "--", "cat", "precious"); out != "mine\n" {
		t.Fatalf("the workspace: %q", out)
	}
}
