package host

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/grant"
	"golang.org/x/sys/unix"
)

// TestReaderReadsOnlyWhatTheCallerMay: a tenant's reader refuses a file
// it may not read however the path reaches it: named directly, through a
// system directory and "..", or through a link planted in a directory of
// the system directories that runs may write (an operator's /opt/data),
// to a file elsewhere or, through /proc/PID/root, to one of another mount
// namespace's system directories; a FIFO there it refuses without
// waiting; the system's own programs and their links it reads.
func TestReaderReadsOnlyWhatTheCallerMay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a directory under /opt")
	}
	secret := filepath.Join(t.TempDir(), "secret.wasm")
	if err := os.WriteFile(secret, []byte("\x00asm\x01\x00\x00\x00 another tenant's"), 0o600); err != nil {
		t.Fatal(err)
	}
	opt := writableSystemDir(t)
	planted := filepath.Join(opt, "planted.wasm")
	if err := os.Symlink(secret, planted); err != nil {
		t.Fatal(err)
	}
	sh := filepath.Join(opt, "sh")
	if err := os.Symlink("/bin/sh", sh); err != nil {
		t.Fatal(err)
	}
	// A file of another mount namespace, at a path of the system
	// directories there (its /opt), reached through a magic link: this
	// namespace would name it as if it were its own.
	ns := filepath.Join(opt, "ns")
	if err := os.Mkdir(ns, 0o755); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs none "+ns+" && echo another-namespace > "+ns+"/app.wasm && echo ready && exec sleep 60")
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Skipf("no unshare: %v", err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the other namespace: %q %v", line, err)
	}
	magic := filepath.Join(opt, "magic.wasm")
	if err := os.Symlink(fmt.Sprintf("/proc/%d/root%s/app.wasm", other.Process.Pid, ns), magic); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(opt, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	nowhere := filepath.Join(opt, "nowhere.wasm")
	if err := os.Symlink(filepath.Join(filepath.Dir(secret), "none.wasm"), nowhere); err != nil {
		t.Fatal(err)
	}
	read := (&Host{}).Reader(context.Background(), "mallory", "run")
	for _, p := range []string{secret, "/usr/.." + secret, "/usr/../" + secret[1:]} {
		if b, err := read(p); !errors.As(err, new(*authority.DeniedError)) {
			t.Errorf("%s: read %d bytes, err %v; want it denied", p, len(b), err)
		}
	}
	// Through a planted link: not there, whether or not something is
	// at its end (the same error but for the name).
	_, errPlanted := read(planted)
	_, errNowhere := read(nowhere)
	if !errors.Is(errPlanted, fs.ErrNotExist) || strings.ReplaceAll(fmt.Sprint(errPlanted), planted, "L") != strings.ReplaceAll(fmt.Sprint(errNowhere), nowhere, "L") {
		t.Errorf("a planted link to a file: %v; to none: %v; want both not there, alike", errPlanted, errNowhere)
	}
	// Refused, not read, and not waited on.
	for _, p := range []string{magic, fifo} {
		if b, err := read(p); err == nil {
			t.Errorf("%s: read %q", p, b)
		}
	}
	for _, p := range []string{"/bin/true", sh} {
		b, err := read(p)
		want, _ := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, want) || len(b) == 0 {
			t.Errorf("%s: %d bytes, %v; want its %d", p, len(b), err, len(want))
		}
	}
	// Through Command, as a service makes a run: refused, not read.
	if _, err := Command(CommandLine{Args: []string{"/usr/.." + secret}, Cwd: "/", Read: read}); !errors.As(err, new(*authority.DeniedError)) {
		t.Errorf("a run of /usr/..%s: %v, want it denied", secret, err)
	}
}

// TestCommandLookupTellsNothingOfAnothersDirectory: a tenant's command
// looked up in a PATH that names a directory it may not read is not
// found there whether or not the file is, and one in the system
// directories is found.
func TestCommandLookupTellsNothingOfAnothersDirectory(t *testing.T) {
	h := &Host{}
	ctx := context.Background()
	cl := func(dir string) CommandLine {
		return CommandLine{Args: []string{"tool"}, Env: map[string]string{"PATH": dir}, Cwd: "/",
			Read: h.Reader(ctx, "mallory", "run"), Look: h.Looker(ctx, "mallory", "run")}
	}
	with, without := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(with, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, errWith := Command(cl(with))
	_, errWithout := Command(cl(without))
	var pe *ProgramError
	if !errors.As(errWith, &pe) || !pe.NotFound {
		t.Fatalf("a tool in another's directory: %v, want not found", errWith)
	}
	if got, want := strings.ReplaceAll(errWith.Error(), with, "DIR"), strings.ReplaceAll(errWithout.Error(), without, "DIR"); got != want {
		t.Errorf("told apart:\n%s\n%s", got, want)
	}
	// Through a link planted in a directory of the system directories
	// that runs may write (an operator's /opt/data), to each directory.
	if os.Geteuid() == 0 {
		opt := writableSystemDir(t)
		var told []string
		for _, d := range []string{with, without} {
			link := filepath.Join(opt, filepath.Base(filepath.Dir(d))+filepath.Base(d))
			if err := os.Symlink(d, link); err != nil {
				t.Fatal(err)
			}
			_, err := Command(cl(link))
			if !errors.As(err, &pe) || !pe.NotFound {
				t.Errorf("a tool through a link to %s: %v, want not found", d, err)
			}
			c := cl(link)
			c.Args = []string{filepath.Join(link, "tool")}
			_, errNamed := Command(c)
			if !errors.As(errNamed, &pe) || !pe.NotFound {
				t.Errorf("%s/tool named: %v, want it not found", link, errNamed)
			}
			told = append(told, strings.ReplaceAll(fmt.Sprint(err)+fmt.Sprint(errNamed), link, "L"))
		}
		if told[0] != told[1] {
			t.Errorf("told apart through links:\n%s\n%s", told[0], told[1])
		}
	}
	c := cl("/usr/bin:/bin")
	c.Args = []string{"true"}
	if req, err := Command(c); err != nil || req.Entry == "" {
		t.Errorf("true in the system directories: %+v %v", req.Entry, err)
	}
}

// TestReaderKeepsToTheCallersOwn: a tenant whose policy lets it read a
// directory that holds another tenant's workspace reads nothing in that
// workspace (as it may grant none of it), and learns nothing of what
// is there; a FIFO in its own workspace is refused without waiting.
func TestReaderKeepsToTheCallersOwn(t *testing.T) {
	base := t.TempDir()
	bobs, mine := filepath.Join(base, "bob-ws"), filepath.Join(base, "mallory-ws")
	for _, d := range []string{bobs, mine} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bobs, "m.wasm"), []byte("\x00asm\x01\x00\x00\x00 bob's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bobs, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(mine, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &Host{
		Policies:   map[string]authority.Policy{"mallory": {Paths: []authority.Path{{Root: base, Mode: grant.RO}}}},
		Workspaces: func() []Workspace { return []Workspace{{Owner: "bob", Path: bobs}, {Owner: "mallory", Path: mine}} },
	}
	ctx := context.Background()
	read := h.Reader(ctx, "mallory", "run")
	if b, err := read(filepath.Join(bobs, "m.wasm")); !errors.As(err, new(*authority.DeniedError)) {
		t.Errorf("bob's module: %d bytes, %v; want it denied", len(b), err)
	}
	done := make(chan error, 1)
	go func() { _, err := read(filepath.Join(mine, "fifo")); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO read as a program")
		}
	case <-time.After(time.Minute):
		t.Fatal("the reader waits on a FIFO")
	}
	var told []string
	for _, name := range []string{"tool", "none"} {
		_, err := Command(CommandLine{Args: []string{name}, Env: map[string]string{"PATH": bobs}, Cwd: "/", Read: read, Look: h.Looker(ctx, "mallory", "run")})
		told = append(told, strings.ReplaceAll(fmt.Sprint(err), name, "NAME"))
	}
	if told[0] != told[1] {
		t.Errorf("bob's directory told apart:\n%s\n%s", told[0], told[1])
	}
}

// writableSystemDir is a directory of the system directories that runs
// may write, as an operator's /opt/data: one of the test's own under
// /opt, removed after it (root only).
func writableSystemDir(t *testing.T) string {
	t.Helper()
	if err := os.MkdirAll("/opt", 0o755); err != nil {
		t.Fatal(err)
	}
	opt, err := os.MkdirTemp("/opt", "sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(opt) })
	return opt
}
