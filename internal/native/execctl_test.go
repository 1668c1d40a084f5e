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
	// A copy the guest cannot write (exec control makes what it can
	// write noexec): only the content says it is whoami.
	copied := filepath.Join(work, "copied")
	b, _ := os.ReadFile("/usr/bin/whoami")
	os.WriteFile(copied, b, 0o755)
	g := mustGrants(t, "exec:deny:"+fileAddr(t, "/usr/bin/whoami").String(), "exec:deny:"+fileAddr(t, script).String(), "fs:"+work+":ro")
	r, log := netRunOn(t, nil, true, g, nil, "/bin/sh", "-c",
		"whoami; "+copied+"; cp /usr/bin/whoami /tmp/w && /tmp/w; env whoami; sh "+script+"; "+script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "script ran\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	for _, want := range []string{"whoami: Operation not permitted", copied + ": Operation not permitted", "/tmp/w: Permission denied", "env: 'whoami': Operation not permitted", "s.sh: Operation not permitted"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if lt := logText(log); !strings.Contains(lt, "(kernel exec) false exec:deny:") {
		t.Errorf("decision log:\n%s", lt)
	}
}

// loaderPath is the system's ELF loader.
func loaderPath(t *testing.T) string {
	for _, p := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no known ELF loader on this host")
	return ""
}

// TestExecControlBypasses tries, as the guest would, every way found to
// run a denied binary or script past exec control: the loader through a
// descriptor (/proc/self/fd, /dev/fd), the loader on a descriptor or a
// memfd, a renamed copy of the loader, a denied script named to its
// interpreter by descriptor, and the swap race (a file rewritten between
// the check and the exec), run a fixed number of times in /tmp and in a
// writable grant. Each is refused, and the run is sealed as exited.
func TestExecControlBypasses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	ld := loaderPath(t)
	ro, rw := t.TempDir(), t.TempDir()
	os.Chmod(ro, 0o755)
	os.Chmod(rw, 0o777)
	script := filepath.Join(ro, "denied.sh")
	os.WriteFile(script, []byte("echo DENIED-SCRIPT-RAN\n"), 0o755)
	lb, _ := os.ReadFile(ld)
	os.WriteFile(filepath.Join(ro, "myld"), lb, 0o755)
	whoami := fileAddr(t, "/usr/bin/whoami")
	g := mustGrants(t, "exec:deny:"+whoami.String(), "exec:deny:"+fileAddr(t, script).String(), "fs:"+ro+":ro", "fs:"+rw+":rw")
	const tries = 200
	race := func(dir string) string {
		// The file is rewritten in place (truncated, then written) by
		// one process while another execs it: the check could hash one
		// content (or the empty file) and the kernel map the other.
		return fmt.Sprintf(`cp /bin/true %[1]s/x; python3 -c '
import os, subprocess, sys
x = sys.argv[1]
a, b = open("/bin/true", "rb").read(), open("/usr/bin/whoami", "rb").read()
pid = os.fork()
if pid == 0:
    while True:
        for c in (b, a):
            try:
                fd = os.open(x, os.O_WRONLY | os.O_TRUNC)
                os.write(fd, c)
                os.close(fd)
            except OSError:
                pass
for i in range(%[2]d):
    try:
        subprocess.run([x])
    except OSError as e:
        print(e, file=sys.stderr)
os.kill(pid, 9)
' %[1]s/x`, dir, tries)
	}
	attempts := []struct{ name, cmd string }{
		{"loader by /proc/self/fd", "exec 9<" + ld + "; /proc/self/fd/9 /usr/bin/whoami"},
		{"loader by /dev/fd", "exec 9<" + ld + "; /dev/fd/9 /usr/bin/whoami"},
		{"loader on /proc/self/fd", "exec 8</usr/bin/whoami; " + ld + " /proc/self/fd/8"},
		{"loader on /dev/fd", "exec 8</usr/bin/whoami; " + ld + " /dev/fd/8"},
		{"loader on a memfd", `python3 -c 'import os; fd = os.memfd_create("m", 0); os.write(fd, open("/usr/bin/whoami", "rb").read()); os.execv("` + ld + `", ["ld", "/proc/self/fd/%d" % fd])'`},
		{"renamed loader", ro + "/myld /usr/bin/whoami"},
		{"loader as an interpreter", "printf '#!" + ld + "\n' > " + rw + "/s; chmod +x " + rw + "/s; " + rw + "/s"},
		{"script by /proc/self/fd", "exec 7<" + script + "; sh /proc/self/fd/7"},
		{"script by /dev/fd", "exec 7<" + script + "; sh /dev/fd/7"},
		{"swap race in /tmp", race("/tmp")},
		{"swap race in a writable grant", race(rw)},
	}
	var b strings.Builder
	for _, a := range attempts {
		fmt.Fprintf(&b, "(%s) >/tmp/out 2>/tmp/err; if grep -q -e nobody -e DENIED-SCRIPT-RAN /tmp/out; then echo 'RAN %s'; else echo 'refused %s:' $(tail -c 100 /tmp/err); fi\n", a.cmd, a.name, a.name)
	}
	b.WriteString("id -un\n")
	r, log := netRun(t, nil, g, nil, "/bin/sh", "-c", b.String())
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("\n%s", r.stdout)
	if !strings.HasSuffix(r.stdout, "nobody\n") || r.res.Outcome.ExitCode == nil || *r.res.Outcome.ExitCode != 0 {
		t.Fatalf("an allowed program did not run: %q %s %+v", r.stdout, r.stderr, r.res.Outcome)
	}
	for _, a := range attempts {
		if !strings.Contains(r.stdout, "refused "+a.name+":") {
			t.Errorf("%s: not refused", a.name)
		}
	}
	lt := logText(log)
	for _, want := range []string{"the ELF loader run directly", "(script) false exec:deny:"} {
		if !strings.Contains(lt, want) {
			t.Errorf("decision log lacks %q:\n%s", want, lt)
		}
	}
}

// TestExecAllowListAdmitsTheLoaderOnlyAsInterpreter: with an allow list
// of one shell, the loader the shell names is admitted for the shell, and
// refused, and logged, when the guest runs it directly through a
// descriptor.
func TestExecAllowListAdmitsTheLoaderOnlyAsInterpreter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("exec control needs root (fanotify permission events)")
	}
	ld := loaderPath(t)
	sh, _ := filepath.EvalSymlinks("/bin/sh")
	g := mustGrants(t, "exec:allow:"+fileAddr(t, sh).String())
	r, log := netRun(t, nil, g, nil, "/bin/sh", "-c", "exec 9<"+ld+"; /proc/self/fd/9 /usr/bin/id -un || echo refused; "+ld+" /usr/bin/id -un || echo refused again")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "refused\nrefused again\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if lt := logText(log); !strings.Contains(lt, "the ELF loader run directly") || !strings.Contains(lt, "the ELF loader of an allowed program") {
		t.Errorf("decision log:\n%s", lt)
	}
}
