package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
)

// cliEnv, set in the environment, makes the test binary the sandbox CLI
// (TestMain hands it its arguments), so that a test can run it as another
// user.
const cliEnv = "SANDBOX_TEST_AS_CLI"

// asCLI runs the CLI with the process's arguments when cliEnv says so.
func asCLI() (int, bool) {
	if os.Getenv(cliEnv) != "1" {
		return 0, false
	}
	return cli(os.Args[1:]), true
}

// rootlessUID is the unprivileged user the rootless tests run sandbox as.
const rootlessUID = 1000

// rootless is sandbox run by an unprivileged user (setpriv, from
// util-linux): a copy of this test binary acting as the CLI, with the S1
// helper beside it, and a state directory owned by that user.
type rootless struct {
	bin, home, dir string
}

// newRootless prepares a rootless sandbox, or skips where the machine
// cannot run one: not root (to switch users), no setpriv, or no
// unprivileged user namespaces.
func newRootless(t *testing.T) *rootless {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the rootless tests switch to an unprivileged user, which needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	if out, err := exec.Command(setpriv, "--reuid="+strconv.Itoa(rootlessUID), "--regid="+strconv.Itoa(rootlessUID), "--clear-groups",
		"unshare", "--user", "--map-root-user", "true").CombinedOutput(); err != nil {
		t.Skipf("unprivileged user namespaces are not available here: %v %s", err, out)
	}
	dir := shareable(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	r := &rootless{bin: filepath.Join(dir, "sandbox"), home: filepath.Join(dir, "home"), dir: dir}
	copyFile(t, self, r.bin, 0o755)
	copyFile(t, helper, filepath.Join(dir, "sandbox-s1"), 0o755)
	r.mkdir(t, r.home)
	return r
}

// shareable is a fresh directory that other users may enter.
func shareable(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
		if filepath.Dir(d) == os.TempDir() {
			break
		}
	}
	return dir
}

// mkdir makes a directory owned by the rootless user.
func (r *rootless) mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, rootlessUID, rootlessUID); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs sandbox ARGS as the rootless user.
func (r *rootless) run(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	id := strconv.Itoa(rootlessUID)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", r.bin, "--home", r.home}, args...)...)
	cmd.Env = []string{cliEnv + "=1", "HOME=" + r.dir, "PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdin = stdin
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("setpriv sandbox: %v", err)
	}
	return o.String(), e.String(), code
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestRootlessInitOutOfReach runs the escape battery as an unprivileged
// user, where the guest is the same user as the run's init: it can
// neither signal, renice nor limit init, nor read its environment or
// descriptors, nor forge its report; and the run verifies.
func TestRootlessInitOutOfReach(t *testing.T) {
	r := newRootless(t)
	g := r.mkdir(t, filepath.Join(r.dir, "g"))
	rw := r.mkdir(t, filepath.Join(r.dir, "rw"))
	copyFile(t, mustGuest(t, "escape"), filepath.Join(g, "escape"), 0o755)
	out, errOut, code := r.run(t, nil, "run", "-q", "--grant", "fs:"+g+":ro", "--grant", "fs:"+rw+":rw",
		"--env", "ESCAPE_GRANT="+g, "--env", "ESCAPE_RW_DIR="+rw, "--env", "ESCAPE_PORT=1", "--env", "ESCAPE_HOSTPID=1", "--", filepath.Join(g, "escape"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, w := range []string{"signal pid 1 (init)", "queue a SIGSEGV to pid 1 (init)", "signal a thread of init", "renice pid 1 (init)",
		"renice init through its user", "set pid 1's limits (init)", "read init's environment", "list init's descriptors", "write init's status pipe",
		"chmod 6755 in a rw grant", "create with mode 4755 in a rw grant", "set security.capability in a rw grant"} {
		if !strings.Contains(out, w+": BLOCKED") {
			t.Errorf("%s: not blocked", w)
		}
	}
	if strings.Contains(out, "ESCAPED") {
		t.Errorf("battery:\n%s", out)
	}
	filepath.Walk(rw, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s left the run with mode %v", p, fi.Mode())
		}
		return nil
	})
	vout, _, vcode := r.run(t, nil, "verify", "--trust-host", "last")
	if vcode != 0 || !strings.Contains(vout, "exited at S1") {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
}

func mustGuest(t *testing.T, name string) string {
	t.Helper()
	p, err := guestbuild.Native(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRootlessGrantsReachNoHostState: rootless, a link planted by an
// earlier run to /proc is refused, and so is any grant that contains the
// state directory (which holds the host key and the compiled-code cache).
func TestRootlessGrantsReachNoHostState(t *testing.T) {
	r := newRootless(t)
	a := r.mkdir(t, filepath.Join(r.dir, "a"))
	out, errOut, code := r.run(t, nil, "run", "-q", "--grant", "fs:"+a+":rw", "--", "sh", "-c", "ln -s /proc "+a+"/p")
	if code != 0 {
		t.Fatalf("plant: %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct{ grant, want string }{
		{"fs:" + a + "/p:ro", a + "/p is a symbolic link (to /proc)"},
		{"fs:" + r.dir + ":ro", "it contains sandbox's state directory"},
		{"fs:" + r.home + ":rw", "it is sandbox's state directory"},
		{"fs:" + r.dir + ":rw", "it contains sandbox's state directory"},
	} {
		out, errOut, code := r.run(t, nil, "run", "-q", "--grant", tc.grant, "--", "cat", r.home+"/host.key")
		if code != 125 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d stdout %q stderr %q", tc.grant, code, out, errOut)
		}
	}
}
