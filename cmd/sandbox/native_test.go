package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
)

// notifyBuffer is a buffer that says when a string has been written.
type notifyBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.seen != nil && strings.Contains(b.buf.String(), b.want) {
		close(b.seen)
		b.seen = nil
	}
	return n, err
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestNativeInterrupt interrupts sandbox as a terminal's Ctrl-C does
// (main turns SIGINT into the canceled context run gets): the guest's trap
// runs, its exit status passes through, and the run is sealed.
func TestNativeInterrupt(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 as tested here runs as root (the CI machines' user)")
	}
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &notifyBuffer{want: "ready", seen: make(chan struct{})}
	seen := out.seen
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--home", home, "run", "-q", "--", "sh", "-c",
			`trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.05; done`}, out, &errb)
	}()
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("the guest never became ready: %q %s", out.String(), errb.String())
	}
	cancel()
	var code int
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("sandbox did not end after the interrupt")
	}
	if code != 7 || out.String() != "ready\ninterrupted\n" {
		t.Fatalf("exit %d stdout %q stderr %s", code, out.String(), errb.String())
	}
	vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
	if vcode != 0 {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
}

// TestNativeEscapeSealed runs the escape battery through sandbox run: every
// attempt fails, and the run is sealed and verifies.
func TestNativeEscapeSealed(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the battery runs as root, where the guest becomes nobody")
	}
	home, g, q, rw := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	os.Chmod(g, 0o755)
	os.Chmod(rw, 0o777)
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "escape"), 0o755)
	// Set-user-ID root (os.ModeSetuid: os.Chmod drops a bare 0o4000).
	guestbuild.Install(t, guestbuild.Native, "escape", filepath.Join(g, "suid-escape"), os.ModeSetuid|0o755)
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "fs:"+g+":ro", "--grant", "fs:"+q+":rw:quota=1MiB", "--grant", "fs:"+rw+":rw",
		"--env", "ESCAPE_GRANT="+g, "--env", "ESCAPE_QUOTA_DIR="+q, "--env", "ESCAPE_RW_DIR="+rw, "--env", "ESCAPE_PORT=1",
		"--env", "ESCAPE_HOSTPID="+strconv.Itoa(os.Getpid()), "--", filepath.Join(g, "escape"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "ESCAPED") || !strings.Contains(out, "open_by_handle_at: BLOCKED") {
		t.Fatalf("battery:\n%s", out)
	}
	vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
	if vcode != 0 || !strings.Contains(vout, "exited at S1") {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
}

// TestNativeExecDeny refuses a binary by content through sandbox run: a
// copy under another name fails with EACCES, the allowed program around
// it runs, and the sealed run verifies with the denial in its log.
func TestNativeExecDeny(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	home := t.TempDir()
	hout, _, code := sandbox(t, home, "hash", "/usr/bin/whoami")
	if code != 0 {
		t.Fatalf("hash: %d", code)
	}
	a := strings.Fields(hout)[0]
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "exec:deny:"+a, "--", "sh", "-c", "cp /usr/bin/whoami /tmp/me; /tmp/me; echo after $?")
	if code != 0 || out != "after 126\n" || !strings.Contains(errOut, "/tmp/me: Permission denied") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errOut)
	}
	vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
	if vcode != 0 {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "DENY  exec exec "+a+" /tmp/me") {
		t.Fatalf("show:\n%s", show)
	}
}

// TestSymlinkPlantedForALaterGrant: a first run that owns a directory
// plants links in it; a later run granted a path through them is refused
// with the link named, before anything runs, and the host's /etc is never
// mounted. As root and rootless.
func TestSymlinkPlantedForALaterGrant(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 as tested here runs as root (the CI machines' user)")
	}
	home, a := t.TempDir(), t.TempDir()
	os.Chmod(a, 0o777)
	rw := filepath.Join(a, "rwplace")
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "fs:"+a+":rw", "--", "sh", "-c",
		"ln -s ../../../../../../etc "+a+"/sub && ln -s /proc "+a+"/p && mkdir "+rw+" && ln -s "+rw+" "+a+"/ro")
	if code != 0 {
		t.Fatalf("plant: %d %s %s", code, out, errOut)
	}
	before := sum(t, "/etc/passwd")
	for _, tc := range []struct{ grant, link string }{
		{"fs:" + a + "/sub:rw", a + "/sub"},
		{"fs:" + a + "/p:ro", a + "/p"},
		{"fs:" + a + "/ro:ro", a + "/ro"},
		{"fs:" + a + "/sub/passwd:rw", a + "/sub"},
	} {
		out, errOut, code := sandbox(t, home, "run", "-q", "--grant", tc.grant, "--", "sh", "-c", "echo RAN > /tmp/x; echo ran")
		if code != 125 || out != "" || !strings.Contains(errOut, tc.link+" is a symbolic link") {
			t.Errorf("%s: exit %d stdout %q stderr %q", tc.grant, code, out, errOut)
		}
	}
	if sum(t, "/etc/passwd") != before {
		t.Fatal("/etc/passwd changed")
	}
}

func sum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNativeExecBypassesSealed: the loader reached through a descriptor
// and the in-place swap race, through sandbox run: refused, and the run
// is sealed, verifies, and shows the refusals.
func TestNativeExecBypassesSealed(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	ld := "/lib64/ld-linux-x86-64.so.2"
	if _, err := os.Stat(ld); err != nil {
		t.Skip("no x86-64 ELF loader here")
	}
	home := t.TempDir()
	hout, _, _ := sandbox(t, home, "hash", "/usr/bin/whoami")
	a := strings.Fields(hout)[0]
	script := `exec 9<` + ld + `; /proc/self/fd/9 /usr/bin/whoami; echo loader $?
cp /bin/true /tmp/x; (i=0; while [ $i -lt 50 ]; do cat /usr/bin/whoami > /tmp/x; cat /bin/true > /tmp/x; i=$((i+1)); done) &
i=0; while [ $i -lt 50 ]; do /tmp/x 2>/dev/null; i=$((i+1)); done; wait; echo raced`
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "exec:deny:"+a, "--", "sh", "-c", script)
	if code != 0 || strings.Contains(out, "nobody") || !strings.Contains(out, "loader 126") || !strings.Contains(out, "raced") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errOut)
	}
	if vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last"); vcode != 0 {
		t.Fatalf("verify: %d\n%s", vcode, vout)
	}
	if show, _, _ := sandbox(t, home, "show", "last"); !strings.Contains(show, "the ELF loader run directly") {
		t.Fatalf("show:\n%s", show)
	}
}

// TestS1RecordsSayWhatS1Is: an S1 run's journal holds only its outcome,
// replay says plainly that S1 runs are not replayable, and the decision
// log has each grant as it was mounted.
func TestS1RecordsSayWhatS1Is(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 as tested here runs as root (the CI machines' user)")
	}
	home, g := t.TempDir(), t.TempDir()
	os.Chmod(g, 0o777)
	if _, errOut, code := sandbox(t, home, "run", "-q", "--grant", "fs:"+g+":rw", "--", "true"); code != 0 {
		t.Fatalf("run: %d %s", code, errOut)
	}
	out, errOut, code := sandbox(t, home, "replay", "last")
	if code == 0 || !strings.Contains(out+errOut, "S1 runs are not replayable") {
		t.Errorf("replay of an S1 run: %d %s %s", code, out, errOut)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "fs write "+g) || !strings.Contains(show, "mounted read-write") || !strings.Contains(show, "outcome ×1") {
		t.Errorf("show:\n%s", show)
	}
}

// TestS0AsAUserAsksForIt: `sandbox run --tier S0` runs a native program
// bare (its status passes through, the record says S0 and that nothing
// confined it, it verifies); without --tier it is S1; doctor lists S0.
func TestS0AsAUserAsksForIt(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1, the comparison, needs root here")
	}
	home := t.TempDir()
	out, e, code := sandbox(t, home, "run", "-q", "--tier", "S0", "--", "/bin/sh", "-c", "echo bare; exit 5")
	if code != 5 || out != "bare\n" {
		t.Fatalf("%d %q %s", code, out, e)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "tier       S0 Bare") || !strings.Contains(show, "nothing confined it") {
		t.Fatalf("show:\n%s", show)
	}
	if _, e, code := sandbox(t, home, "verify", "--trust-host", "last"); code != 0 {
		t.Fatalf("verify: %s", e)
	}
	sandbox(t, home, "run", "-q", "--", "/bin/true")
	if show, _, _ := sandbox(t, home, "show", "last"); !strings.Contains(show, "tier       S1") {
		t.Fatalf("unasked:\n%s", show)
	}
	if doc, _, _ := sandbox(t, home, "doctor"); !strings.Contains(doc, "S0 Bare         yes") {
		t.Fatalf("doctor:\n%s", doc)
	}
}
