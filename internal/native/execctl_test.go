//go:build linux

package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
)

func fileAddr(t *testing.T, p string) addr.Addr {
	t.Helper()
	a, err := addr.OfFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestExecDenyList refuses one binary, by content, however it is
// reached: renamed, copied, moved, hard and soft linked, through sh -c,
// env, xargs, an interpreter's own exec, the dynamic loader, a script
// named to its interpreter, and a memfd.
func TestExecDenyList(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	work := t.TempDir()
	os.Chmod(work, 0o777)
	script := filepath.Join(work, "denied.sh")
	os.WriteFile(script, []byte("echo the denied script ran\n"), 0o755)
	denied := fileAddr(t, "/usr/bin/whoami")
	g := mustGrants(t, "exec:deny:"+denied.String(), "exec:deny:"+fileAddr(t, script).String(), "fs:"+work+":rw")
	loader, _ := filepath.Glob("/lib64/ld-linux-x86-64.so.2")
	ld := "/lib64/ld-linux-x86-64.so.2"
	if len(loader) == 0 {
		ld = "/lib/ld-linux-aarch64.so.1"
	}
	attempts := []struct{ name, cmd string }{
		{"direct", "whoami"},
		{"rename", "cp /usr/bin/whoami /tmp/renamed && /tmp/renamed"},
		{"copy elsewhere", "cp /usr/bin/whoami " + work + "/copy && " + work + "/copy"},
		{"move", "cp /usr/bin/whoami /tmp/a && mv /tmp/a /tmp/moved && /tmp/moved"},
		{"hard link", "cp /usr/bin/whoami /tmp/h && ln /tmp/h /tmp/hardlink && /tmp/hardlink"},
		{"symlink", "ln -s /usr/bin/whoami /tmp/symlink && /tmp/symlink"},
		{"sh -c", "sh -c whoami"},
		{"env", "env whoami"},
		{"xargs", "echo | xargs whoami"},
		{"interpreter exec", `python3 -c 'import os; os.execv("/usr/bin/whoami", ["whoami"])'`},
		{"dynamic loader", ld + " /usr/bin/whoami"},
		{"script by interpreter", "sh " + script},
		{"script by exec", script},
		{"memfd", `python3 -c 'import os; fd = os.memfd_create("m", 0); os.write(fd, open("/usr/bin/whoami", "rb").read()); os.execv("/proc/self/fd/%d" % fd, ["m"])'`},
	}
	var b strings.Builder
	b.WriteString("id -un\n")
	for _, a := range attempts {
		fmt.Fprintf(&b, "if (%s) >/dev/null 2>/tmp/err; then echo 'RAN %s'; else echo 'refused %s:' $(tail -c 120 /tmp/err); fi\n", a.cmd, a.name, a.name)
	}
	r, log := netRun(t, nil, g, nil, "/bin/sh", "-c", b.String())
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("\n%s", r.stdout)
	if !strings.HasPrefix(r.stdout, "nobody\n") {
		t.Fatalf("an allowed program did not run: %q %s", r.stdout, r.stderr)
	}
	for _, a := range attempts {
		if !strings.Contains(r.stdout, "refused "+a.name+":") {
			t.Errorf("%s: not refused", a.name)
		}
	}
	if strings.Contains(r.stdout, "RAN") {
		t.Errorf("a denied binary ran")
	}
	// The shell's own exec failures say EACCES.
	if !strings.Contains(r.stdout, "whoami: Permission denied") {
		t.Errorf("direct: want EACCES from the shell")
	}
	lt := logText(log)
	if !strings.Contains(lt, "exec exec "+denied.String()+" /usr/bin/whoami false exec:deny:"+denied.String()) {
		t.Errorf("decision log has no denial of whoami:\n%s", lt)
	}
	if !strings.Contains(lt, "(script) false exec:deny:") {
		t.Errorf("decision log has no denial of the script:\n%s", lt)
	}
}

// TestExecAllowList admits only the listed binaries (and the loader they
// name): the shell and id run, anything else is refused.
func TestExecAllowList(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	g := mustGrants(t, "exec:allow:"+fileAddr(t, sh).String(), "exec:allow:"+fileAddr(t, "/usr/bin/id").String())
	r, log := netRun(t, nil, g, nil, "/bin/sh", "-c", "id -u; whoami || echo whoami refused; ls / || echo ls refused")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "65534\nwhoami refused\nls refused\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	lt := logText(log)
	for _, want := range []string{"the ELF loader of an allowed program", "/usr/bin/id true exec:allow:", "/usr/bin/whoami false not on the exec allow-list"} {
		if !strings.Contains(lt, want) {
			t.Errorf("decision log lacks %q:\n%s", want, lt)
		}
	}
	// The program itself must be on the list.
	r, _ = netRun(t, nil, g, nil, "/usr/bin/whoami")
	if r.err != nil || r.res.Outcome.ExitCode != nil || !strings.Contains(r.res.Outcome.Detail, "exec /usr/bin/whoami: permission denied") {
		t.Fatalf("an unlisted program started: %+v %v %s", r.res, r.err, r.stderr)
	}
}

// TestExecKernelLayerAlone runs the deny list with the seccomp layer left
// out: the kernel's exec path (fanotify) still refuses the binary however
// it is named, with EPERM; what only the first layer covers (a script
// named to its interpreter) then runs, as docs/exec-control.md says.
func TestExecKernelLayerAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	work := t.TempDir()
	os.Chmod(work, 0o755)
	script := filepath.Join(work, "s.sh")
	os.WriteFile(script, []byte("echo script ran\n"), 0o755)
	g := mustGrants(t, "exec:deny:"+fileAddr(t, "/usr/bin/whoami").String(), "exec:deny:"+fileAddr(t, script).String(), "fs:"+work+":ro")
	r, log := netRunOn(t, nil, true, g, nil, "/bin/sh", "-c",
		"whoami; cp /usr/bin/whoami /tmp/w && /tmp/w; env whoami; sh "+script+"; "+script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "script ran\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	for _, want := range []string{"whoami: Operation not permitted", "/tmp/w: Operation not permitted", "env: 'whoami': Operation not permitted", "s.sh: Operation not permitted"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if lt := logText(log); !strings.Contains(lt, "(kernel exec) false exec:deny:") {
		t.Errorf("decision log:\n%s", lt)
	}
}
