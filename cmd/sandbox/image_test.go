package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/image/imagetest"
)

// TestImageAsAUserRunsIt: import a docker save archive, list it, run a
// command in it here and through the service, make a sandbox from a
// devcontainer.json naming it, suspend it, change a file of the image's
// root and see the resumption refused; remove the image and see a run
// in it refused by name.
func TestImageAsAUserRunsIt(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 runs in an image root need root here")
	}
	home := t.TempDir()
	dir := t.TempDir()
	arch := imagetest.DockerArchive(t, imagetest.Image(t), filepath.Join(dir, "image.tar"))
	out, errOut, code := runCLI(t, home, "", "image", "import", arch, "--name", "mine:1")
	if code != 0 || !strings.Contains(out, "imported ") || !strings.Contains(errOut, "left out 1") || strings.Contains(errOut, "sandbox: image import") {
		t.Fatalf("import: %d %q %q", code, out, errOut)
	}
	// Again on a terminal: progress, the layer bytes read (a docker save
	// archive names no sizes: no total) and their rate.
	if out, shown, code := runOnTerminal(t, home, "image", "import", arch); code != 0 || !strings.Contains(out, "imported ") || !strings.Contains(shown, "\rsandbox: image import ") || !strings.Contains(shown, "/s") {
		t.Fatalf("import on a terminal: %d %q %q", code, out, shown)
	}
	out, _, code = runCLI(t, home, "", "image", "ls", "--json")
	var imgs []image.Image
	if code != 0 || json.Unmarshal([]byte(out), &imgs) != nil || len(imgs) != 1 || strings.Join(imgs[0].Names, ",") != "mine:1,"+imagetest.Name {
		t.Fatalf("ls: %d %q", code, out)
	}
	out, errOut, code = runCLI(t, home, "", "run", "-q", "--local", "--image", "mine:1", "--", "cat", "/etc/os-release")
	if code != 0 || out != imagetest.OSRelease {
		t.Fatalf("run --image: %d %q %q", code, out, errOut)
	}
	if out, errOut, code = runCLI(t, home, "", "show", "last"); code != 0 || !strings.Contains(out, "root     "+imgs[0].Root.String()) {
		t.Fatalf("show: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = runCLI(t, home, "", "run", "-q", "--local", "--image", "mine:1", "--", "go", "version"); code != 127 {
		t.Fatalf("a host-only program: %d %q", code, errOut)
	}

	startServe(t, home)
	out, errOut, code = runCLI(t, home, "", "run", "-q", "--image", "mine:1", "--", "sh", "-c", "echo $IMAGE")
	if code != 0 || out != "sandbox-test\n" {
		t.Fatalf("run --image via the service: %d %q %q", code, out, errOut)
	}
	dc := filepath.Join(dir, "devcontainer.json")
	os.WriteFile(dc, []byte(`{
  // the image, and what the environment declares
  "image": "mine:1",
  "containerEnv": {"FROM": "manifest"},
  "forwardPorts": [3000],
}`), 0o644)
	out, errOut, code = runCLI(t, home, "", "create", "--manifest", dc, "--json")
	var sb struct {
		ID       string `json:"id"`
		Root     string `json:"root"`
		Manifest string `json:"manifest"`
		Listen   []int  `json:"listen"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.Root != imgs[0].Root.String() || sb.Manifest == "" || len(sb.Listen) != 1 {
		t.Fatalf("create --manifest: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, home, "", "exec", sb.ID, "--", "sh", "-c", "echo $FROM; cat /etc/motd")
	if code != 0 || out != "manifest\nlayer two\n" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	// A manifest with features is refused: each is a script.
	os.WriteFile(dc, []byte(`{"image": "mine:1", "features": {"ghcr.io/devcontainers/features/go:1": {}}}`), 0o644)
	if _, errOut, code = runCLI(t, home, "", "create", "--manifest", dc); code != 2 || !strings.Contains(errOut, "features") {
		t.Fatalf("create with features: %d %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, home, "", "suspend", sb.ID); code != 0 {
		t.Fatalf("suspend: %d %q", code, errOut)
	}
	root := filepath.Join(home, "images", "roots", imgs[0].Root.Hex())
	if err := os.WriteFile(filepath.Join(root, "etc", "motd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code = runCLI(t, home, "", "resume", sb.ID); code != 4 || !strings.Contains(errOut, "root filesystem") {
		t.Fatalf("resume on a changed root: %d %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, home, "", "image", "verify", "mine:1"); code != 4 {
		t.Fatalf("image verify on a changed root: %d %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, home, "", "image", "rm", "mine:1"); code != 0 {
		t.Fatalf("rm: %d %q", code, errOut)
	}
	if _, errOut, code = runCLI(t, home, "", "run", "-q", "--image", "mine:1", "--", "true"); code != 125 || !strings.Contains(errOut, "image import") {
		t.Fatalf("run in a removed image: %d %q", code, errOut)
	}
}

// TestPoolAsAUserClaimsOne: a service started with a warm pool of the
// test image hands a ready sandbox to 'create --pool'; its record
// begins with the claim and its idle energy; a bad --pool is refused.
func TestPoolAsAUserClaimsOne(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	arch := imagetest.DockerArchive(t, imagetest.Image(t), filepath.Join(t.TempDir(), "image.tar"))
	if _, errOut, code := runCLI(t, home, "", "image", "import", arch); code != 0 {
		t.Fatalf("import: %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, home, "", "serve", "--pool", "dev:size=0"); code != 2 || !strings.Contains(errOut, "size") {
		t.Fatalf("serve with a bad pool: %d %q", code, errOut)
	}
	startServe(t, home, "--pool", "dev:size=1,image="+imagetest.Name+",max-age=1h")
	waitPoolReady(t, home, 1)
	out, errOut, code := runCLI(t, home, "", "create", "--pool", "dev")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create --pool: %d %q %q", code, out, errOut)
	}
	if out, errOut, code = runCLI(t, home, "", "exec", id, "--", "cat", "/etc/motd"); code != 0 || out != "layer two\n" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, home, "", "record", "verify", id)
	if code != 0 || !strings.Contains(out, "idle") {
		t.Fatalf("record verify: %d %q %q", code, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(home, "records", id+".jsonl"))
	if err != nil || !strings.Contains(strings.Split(string(b), "\n")[1], `"kind":"claimed","pool":"dev"`) {
		t.Fatalf("record: %v %s", err, b)
	}
	if _, errOut, code = runCLI(t, home, "", "create", "--pool", "nope"); code != 3 {
		t.Fatalf("claim from no pool: %d %q", code, errOut)
	}
}

// TestImageImportKilledAtEveryStep: an import killed after its layers
// are applied, or after its root is renamed into place, leaves no image
// listed and no half-written root; the next import of the same source
// finishes, and its root verifies.
func TestImageImportKilledAtEveryStep(t *testing.T) {
	t.Parallel()
	arch := imagetest.DockerArchive(t, imagetest.Image(t), filepath.Join(t.TempDir(), "image.tar"))
	for _, p := range crash.ImagePoints {
		t.Run(p, func(t *testing.T) {
			home := t.TempDir()
			cmd := cliCmd(t, home, []string{crash.Env + "=" + p}, "image", "import", arch)
			err := cmd.Run()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("not killed at %s: %v", p, err)
			}
			if out, _, code := runCLI(t, home, "", "image", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
				t.Fatalf("listed after a kill at %s: %d %s", p, code, out)
			}
			if out, e, code := runCLI(t, home, "", "image", "import", arch); code != 0 {
				t.Fatalf("import after a kill at %s: %d %s %s", p, code, out, e)
			}
			if out, e, code := runCLI(t, home, "", "image", "verify", imagetest.Name); code != 0 {
				t.Fatalf("verify: %d %s %s", code, out, e)
			}
			ents, _ := os.ReadDir(filepath.Join(home, "images", "roots"))
			if len(ents) != 2 { // the root and its listing
				t.Fatalf("roots: %v", ents)
			}
			if ents, _ := os.ReadDir(filepath.Join(home, "images", "staging")); len(ents) != 0 {
				t.Fatalf("staging left: %v", ents)
			}
		})
	}
}

// TestImageImportOnAFullDisk: an import that runs out of space fails
// saying so, keeps nothing, and the store takes the next import once
// there is room.
func TestImageImportOnAFullDisk(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs as the state directory needs root")
	}
	arch := imagetest.DockerArchive(t, imagetest.Image(t), filepath.Join(t.TempDir(), "image.tar"))
	home := smallStateDir(t, 16<<20) // the image unpacks to about 31 MiB
	_, e, code := runCLI(t, home, "", "image", "import", arch)
	if code == 0 || !strings.Contains(e, "no space left") {
		t.Fatalf("import on a full disk: %d %s", code, e)
	}
	if out, _, _ := runCLI(t, home, "", "image", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("listed: %s", out)
	}
	for _, d := range []string{"roots", "staging"} {
		if ents, _ := os.ReadDir(filepath.Join(home, "images", d)); len(ents) != 0 {
			t.Fatalf("%s left: %v", d, ents)
		}
	}
	if err := unix.Mount("", home, "", unix.MS_REMOUNT, "size=128m"); err != nil {
		t.Fatal(err)
	}
	if _, e, code := runCLI(t, home, "", "image", "import", arch); code != 0 {
		t.Fatalf("import with room: %d %s", code, e)
	}
}

// TestPoolAfterAKilledService: a service killed (kill -9) with sandboxes
// its pool made ready leaves records the next service closes, saying
// they were never claimed; none of them is suspended under anyone's
// name, and a claimed one is suspended for its claimer as any sandbox.
func TestPoolAfterAKilledService(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	sv := startServe(t, home, "--pool", "dev:size=2")
	waitPoolReady(t, home, 2)
	out, e, code := runCLI(t, home, "", "create", "--pool", "dev")
	claimed := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("claim: %d %s", code, e)
	}
	waitPoolReady(t, home, 2) // refilled: two unclaimed again
	sv.Process.Kill()
	sv.Wait()
	startServe(t, home)
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	var l []struct{ ID, State string }
	json.Unmarshal([]byte(out), &l)
	if len(l) != 1 || l[0].ID != claimed || l[0].State != "suspended" {
		t.Fatalf("after the kill: %s", out)
	}
	ents, _ := os.ReadDir(filepath.Join(home, "records"))
	closed := 0
	for _, en := range ents {
		if !strings.HasSuffix(en.Name(), ".jsonl") || strings.HasPrefix(en.Name(), claimed) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(home, "records", en.Name()))
		if strings.Contains(string(b), "kept ready by a pool whose host ended before it was claimed") {
			closed++
		}
	}
	if closed != 2 {
		t.Fatalf("%d unclaimed records closed, want 2", closed)
	}
}

// TestPoolClaimKilledBeforeItsOwnerIsWritten: the claimer is answered
// once the claim is in the record, and its owner is written after; a
// service killed in between closes the claimed sandbox (its owner is
// unknown) without anything having run in it, and does not suspend it
// for the pool.
func TestPoolClaimKilledBeforeItsOwnerIsWritten(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	sv := startDoomedServe(t, home, crash.ClaimAppended, "--pool", "dev:size=1")
	waitPoolReady(t, home, 1)
	out, _, _ := runCLI(t, home, "", "create", "--pool", "dev") // answered or not: the service dies
	claimed := strings.TrimSpace(out)
	sv.Wait()
	startServe(t, home)
	out, _, _ = runCLI(t, home, "", "ps", "--json")
	if strings.Contains(out, "suspended") || (claimed != "" && strings.Contains(out, claimed)) {
		t.Fatalf("after the kill: %s", out)
	}
	ents, _ := os.ReadDir(filepath.Join(home, "records"))
	found := 0
	for _, en := range ents {
		b, _ := os.ReadFile(filepath.Join(home, "records", en.Name()))
		if strings.Contains(string(b), "claimed from a pool, but its host ended before the claimer was written down") {
			found++
			if !strings.Contains(string(b), `"claimed"`) || strings.Contains(string(b), `"executed"`) {
				t.Fatalf("record %s:\n%s", en.Name(), b)
			}
		}
	}
	if found != 1 {
		t.Fatalf("%d claimed records closed for an unknown owner, want 1", found)
	}
}

// startDoomedServe starts a service that kills itself at crash point
// point, and waits for its socket.
func startDoomedServe(t *testing.T, home, point string, args ...string) *exec.Cmd {
	t.Helper()
	os.Remove(filepath.Join(home, client.SocketName))
	sv := cliCmd(t, home, []string{crash.Env + "=" + point}, append([]string{"serve"}, args...)...)
	if err := sv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sv.Process.Kill(); sv.Wait() })
	waitServing(sv, home) // or it died at its point on the way
	return sv
}

// waitPoolReady waits until the service's pool has n sandboxes ready.
func waitPoolReady(t *testing.T, home string, n int) {
	t.Helper()
	for i := 0; ; i++ {
		out, _, _ := runCLI(t, home, "", "pools", "--json")
		if strings.Contains(out, fmt.Sprintf(`"ready": %d`, n)) {
			return
		}
		if i > 200 {
			t.Fatalf("the pool has not %d ready: %s", n, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
