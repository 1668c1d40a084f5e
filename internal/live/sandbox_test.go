package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/tier"
)

// newS1Host is a host with S1 (root only) and S2, leased and with cgroups.
func newS1Host(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes with their own cgroups need root")
	}
	h := newBenchHost(t)
	addS1(t, h, hosttest.Lease(t, h.Store))
	t.Cleanup(func() { cleanLive(h) })
	return h
}

// cleanLive ends what a test's host left: it is closed (what is live is
// suspended), and what a suspension keeps beside the state directory,
// or the fence retained, removed.
func cleanLive(h *Manager) {
	h.Close()
	for _, id := range h.recordIDs() {
		os.RemoveAll(h.parkedDir(id)) // kept beside the state directory
		// A sandbox the fence retained keeps its workspace (and its
		// filesystem) for the next host: this test's is none.
		var l live
		if b, err := os.ReadFile(h.livePath(id)); err == nil && json.Unmarshal(b, &l) == nil && l.Workspace != "" {
			removeWorkspace(l.Workspace)
		}
	}
}

func execIn(t *testing.T, h *Manager, id string, args ...string) (*host.Run, string) {
	t.Helper()
	var out, errb bytes.Buffer
	r, err := h.Exec(context.Background(), id, "", ExecRequest{Args: args, Stdout: &out, Stderr: &errb, Deadline: 20 * time.Second})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return r, out.String()
}

// A background process started by one exec keeps running for the next,
// each exec is sealed as a run of its own that names the sandbox, and
// removing the sandbox leaves nothing: no process, cgroup, workspace.
func TestLiveS1Sandbox(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Grants: grants(t), Listen: []int{8765}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Tier != tier.S1 || info.Workspace == "" {
		t.Fatalf("created %+v", info)
	}
	// An agent starts a server, then talks to it.
	r1, out := execIn(t, h, info.ID, "sh", "-c", "python3 -m http.server -b 127.0.0.1 8765 >/dev/null 2>&1 & echo started")
	if r1.Result.Outcome.Status != attest.Exited || strings.TrimSpace(out) != "started" {
		t.Fatalf("exec 1: %+v %q", r1.Result.Outcome, out)
	}
	if err := os.WriteFile(filepath.Join(info.Workspace, "hello.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got string
	for i := 0; i < 50; i++ {
		var r *host.Run
		r, got = execIn(t, h, info.ID, "curl", "-s", "--noproxy", "*", "http://127.0.0.1:8765/hello.txt")
		if r.Result.Outcome.ExitCode != nil && *r.Result.Outcome.ExitCode == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "from the host\n" {
		t.Fatalf("the server the first exec started did not answer the next: %q", got)
	}
	r3, _ := execIn(t, h, info.ID, "sh", "-c", "exit 3")
	if c := r3.Result.Outcome.ExitCode; c == nil || *c != 3 {
		t.Fatalf("exec 3: %+v", r3.Result.Outcome)
	}
	for _, r := range []*host.Run{r1, r3} {
		if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
			t.Fatalf("an exec's run does not verify: %v", err)
		}
		named := false
		for _, n := range r.Attestation.Claim.Notes {
			named = named || strings.Contains(n, info.ID)
		}
		if !named {
			t.Fatalf("the attestation does not name the sandbox: %q", r.Attestation.Claim.Notes)
		}
		if len(r.Receipt.Devices) == 0 {
			t.Fatal("no energy in the receipt")
		}
		db, err := os.ReadFile(filepath.Join(r.Dir, "decisions.json"))
		if err != nil || !strings.Contains(string(db), info.Workspace) || !strings.Contains(string(db), "mounted read-write") {
			t.Fatalf("the exec's decision log does not say what it was given: %s %v", db, err)
		}
	}
	if l := h.Sandboxes(""); len(l) != 1 || l[0].Execs < 3 {
		t.Fatalf("list: %+v", l)
	}
	if l := h.Sandboxes("someone else"); len(l) != 0 {
		t.Fatalf("another owner sees %+v", l)
	}
	if _, err := h.Exec(ctx, info.ID, "someone else", ExecRequest{Args: []string{"true"}}); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("another owner's exec: %v", err)
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(info.Workspace); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("workspace left: %v", err)
	}
	for _, n := range h.Cgroups.Names() {
		if strings.Contains(n, h.Store.Lease.ID) {
			t.Fatalf("cgroup left: %s", n)
		}
	}
	if _, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"true"}}); !errors.Is(err, ErrNoSandbox) {
		t.Fatalf("exec after rm: %v", err)
	}
	if ls, _ := h.GC(true); len(ls) != 0 {
		t.Fatalf("leftovers: %+v", ls)
	}
}

// An exec past its deadline is ended and sealed; the sandbox lives on.
func TestLiveS1ExecDeadline(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	info, err := h.Create(context.Background(), SandboxSpec{Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.Exec(context.Background(), info.ID, "", ExecRequest{Args: []string{"sleep", "30"}, Deadline: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result.Outcome.Status != attest.Deadline {
		t.Fatalf("outcome %+v", r.Result.Outcome)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r, err = h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Result.Outcome.Status != attest.Killed {
		t.Fatalf("an exec whose caller went away: %+v", r.Result.Outcome)
	}
	if _, out := execIn(t, h, info.ID, "echo", "alive"); out != "alive\n" {
		t.Fatalf("after: %q", out)
	}
}

// At S2 a sandbox is a workspace and grants each module run shares.
func TestLiveS2Sandbox(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	info, err := h.Create(context.Background(), SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Remove(info.ID, "")
	if err := os.WriteFile(filepath.Join(info.Workspace, "in.txt"), []byte("shared\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(t.TempDir(), "cat.wasm")
	os.WriteFile(mod, image(t, "cat"), 0o644)
	r, out := execIn(t, h, info.ID, mod, filepath.Join(info.Workspace, "in.txt"))
	if out != "shared\n" || r.Choice.Chosen != tier.S2 {
		t.Fatalf("%q %+v", out, r.Result.Outcome)
	}
	if _, err := h.Exec(context.Background(), info.ID, "", ExecRequest{Args: []string{"/bin/true"}}); err == nil {
		t.Fatal("a native program ran in an S2 sandbox")
	}
}

// A live S1 sandbox with a net grant reaches the granted host, through
// its egress proxy, from every exec, and nothing else; each exec's
// decision log holds the connections made while it ran.
func TestLiveS1SandboxEgress(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "from the granted host\n") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	info, err := h.Create(context.Background(), SandboxSpec{Grants: grants(t, fmt.Sprintf("net:127.0.0.1:%d", port))})
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for i := 0; i < 2; i++ {
		r, out := execIn(t, h, info.ID, "curl", "-s", url)
		if out != "from the granted host\n" || r.Result.Outcome.ExitCode == nil || *r.Result.Outcome.ExitCode != 0 {
			t.Fatalf("exec %d: %q %+v", i, out, r.Result.Outcome)
		}
		db, _ := os.ReadFile(filepath.Join(r.Dir, "decisions.json"))
		if !strings.Contains(string(db), fmt.Sprintf(`"target":"127.0.0.1:%d"`, port)) || !strings.Contains(string(db), `"allow":true`) {
			t.Fatalf("exec %d's decision log does not hold its connection:\n%s", i, db)
		}
	}
	r, _ := execIn(t, h, info.ID, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:1/")
	db, _ := os.ReadFile(filepath.Join(r.Dir, "decisions.json"))
	if !strings.Contains(string(db), `"target":"127.0.0.1:1"`) || !strings.Contains(string(db), `"allow":false`) {
		t.Fatalf("the refusal is not in the exec's decision log:\n%s", db)
	}
	if err := h.Remove(info.ID, ""); err != nil {
		t.Fatal(err)
	}
}
