package host

// Attacks on finding and reading a program as the run will find it
// (openInRun), from helper-56's review of 412275e.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	images "github.com/opensubstrate/sandbox/internal/image"
	"golang.org/x/sys/unix"
)

func viewDir(t *testing.T, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "sandbox-view-")
	if err != nil {
		t.Fatalf("cannot make a directory in %s: %v", parent, err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// commandWithin runs Command, failing the test if it does not return in d
// (a hang: the goroutine is left blocked; release, if given, unblocks it).
func commandWithin(t *testing.T, d time.Duration, c CommandLine, release func()) (Request, error, bool) {
	t.Helper()
	type res struct {
		r   Request
		err error
	}
	ch := make(chan res, 1)
	go func() { r, err := Command(c); ch <- res{r, err} }()
	select {
	case r := <-ch:
		return r.r, r.err, true
	case <-time.After(d):
		if release != nil {
			release()
			<-ch
		}
		return Request{}, nil, false
	}
}

// releaseFIFO opens the FIFO for writing (non-blocking, once a reader
// waits) and closes it: a blocked opener returns.
func releaseFIFO(p string) func() {
	return func() {
		for i := 0; i < 100; i++ {
			if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestAFIFOHoldsNoCommand: a FIFO a guest planted in a writable grant (or
// a link to one), named as the operator's program or found as a bare
// name in its working directory, is refused, never opened so that it
// holds Command until something writes to it (readRegular reaches it with
// O_PATH first). The bound is a hang's, not a measure.
func TestAFIFOHoldsNoCommand(t *testing.T) {
	t.Parallel()
	g0 := viewDir(t, "/var/tmp")
	fifo := filepath.Join(g0, "fifo")
	if err := syscall.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Symlink("fifo", filepath.Join(g0, "tool"))
	os.Symlink("fifo", filepath.Join(g0, "true")) // a bare name, from cwd
	g := grants(t, "fs:"+g0+":rw")
	for _, c := range []CommandLine{
		{Args: []string{filepath.Join(g0, "tool")}, Cwd: "/", Grants: g},
		{Args: []string{filepath.Join(g0, "fifo")}, Cwd: "/", Grants: g},
		{Args: []string{"true"}, Cwd: g0}, // no grant at all: /usr/bin/true is meant
	} {
		req, err, done := commandWithin(t, time.Minute, c, releaseFIFO(fifo))
		switch {
		case !done:
			t.Errorf("%v (cwd %s): Command hung on the FIFO (released by opening it for writing)", c.Args, c.Cwd)
		case c.Args[0] == "true" && (err != nil || req.Entry != "/usr/bin/true" && req.Entry != "/bin/true"):
			t.Errorf("a bare true beside a FIFO of that name: %s, %v; want the system's true", req.Entry, err)
		case c.Args[0] != "true" && err == nil:
			t.Errorf("%v: a FIFO was made a unit of %d bytes", c.Args, len(req.Image))
		}
	}
}

// TestATenantLearnsNoHostDirectory: a tenant that can plant a link in a
// system directory (a writable grant at /opt/data) does not learn whether
// a host directory it may not read exists: the program is looked for and
// read as the run will find it, which walks no host directory the run
// does not see (DIR/../.. is as absent as NOTHING/../..).
func TestATenantLearnsNoHostDirectory(t *testing.T) {
	t.Parallel()
	sys := viewDir(t, "/usr/local")
	secret := viewDir(t, "/var/tmp") // a directory the tenant may not read
	os.Symlink(secret+"/../../../usr/bin/env", filepath.Join(sys, "there"))
	os.Symlink(secret+"-nothing/../../../usr/bin/env", filepath.Join(sys, "absent"))
	onlySystem := func(p string) error {
		if inSystemDirs(p) {
			return nil
		}
		return errors.New("denied: " + p)
	}
	c := CommandLine{Cwd: "/", Read: func(p string) ([]byte, error) { return readSystem(p, onlySystem) }, Look: onlySystem}
	var msgs []string
	for _, n := range []string{"there", "absent"} {
		c.Args = []string{filepath.Join(sys, n)}
		_, err := Command(c)
		msg := strings.ReplaceAll(err.Error(), n, "NAME")
		t.Logf("%s: %v", n, err)
		msgs = append(msgs, msg)
	}
	if msgs[0] != msgs[1] {
		t.Errorf("the tenant tells %s (which it may not read) exists from %s's absence: %q vs %q", secret, secret+"-nothing", msgs[0], msgs[1])
	}
}

// TestAnImagesTopLevelFileIsNotTheRuns: image.Top leaves an image's
// top-level regular file out of the run's root (directories and links
// only), so a link to it leads to nothing: the unit never names bytes the
// run cannot execute.
func TestAnImagesTopLevelFileIsNotTheRuns(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkfile(t, filepath.Join(root, "usr", "bin", "x"), []byte("x"))
	evil := []byte("#!/bin/sh\necho the image's top-level /evil\n")
	mkfile(t, filepath.Join(root, "evil"), evil)
	g0 := viewDir(t, "/var/tmp")
	os.Symlink("/evil", filepath.Join(g0, "tool"))
	g := grants(t, "fs:"+g0+":rw")
	dirs, links, err := images.Top(root)
	if err != nil {
		t.Fatal(err)
	}
	req, err := Command(CommandLine{Args: []string{filepath.Join(g0, "tool")}, Cwd: "/", RootDir: root, Grants: g})
	if err == nil && bytes.Equal(req.Image, evil) {
		t.Errorf("the unit names the image's /evil (%d bytes), which the run's root does not hold (Top: dirs %v, links %v)", len(req.Image), dirs, links)
	}
}

// TestAnImagesTopLevelFileMakesWayForAGrant: where an image's top-level
// /var is a regular file, the run's root has no /var (Top leaves it out)
// and makes one for a grant's mount under it: the program under the
// grant is found.
func TestAnImagesTopLevelFileMakesWayForAGrant(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkfile(t, filepath.Join(root, "usr", "bin", "x"), []byte("x"))
	mkfile(t, filepath.Join(root, "var"), []byte("not a directory"))
	g0 := viewDir(t, "/var/tmp")
	tool := []byte("#!/bin/sh\necho granted tool\n")
	mkfile(t, filepath.Join(g0, "tool"), tool)
	g := grants(t, "fs:"+g0+":rw")
	req, err := Command(CommandLine{Args: []string{filepath.Join(g0, "tool")}, Cwd: "/", RootDir: root, Grants: g})
	if err != nil || !bytes.Equal(req.Image, tool) {
		t.Errorf("the granted program the run executes was refused: %v", err)
	}
}

// TestLibx32IsASystemDirectory: S1 binds /libx32 (native.SystemDirs), so
// the view has it too.
func TestLibx32IsASystemDirectory(t *testing.T) {
	if !inSystemDirs("/libx32/x") || !Visible("/libx32/x", grants(t)) {
		t.Errorf("/libx32/x is not in a system directory; S1 binds /libx32 (native.SystemDirs)")
	}
}

// TestResolveIsTheKernels: image.Resolve (through openInRun, in an
// image) finds what the kernel's own resolution in the root (openat2
// RESOLVE_IN_ROOT) finds, over random trees of directories, files and
// links (absolute, relative, "..", ".", trailing slashes, loops).
func TestResolveIsTheKernels(t *testing.T) {
	t.Parallel()
	names := []string{"a", "b", "c", "..", ".", ""}
	pick := func(r *uint64, s []string) string {
		*r ^= *r << 13
		*r ^= *r >> 7
		*r ^= *r << 17
		return s[*r%uint64(len(s))]
	}
	randPath := func(r *uint64, n int) string {
		var parts []string
		for i := 0; i < n; i++ {
			parts = append(parts, pick(r, names))
		}
		return strings.Join(parts, "/")
	}
	mismatches, found := 0, 0
	defer func() { t.Logf("%d paths found by the kernel", found) }()
	for seed := uint64(1); seed <= 300; seed++ {
		r := seed * 0x9E3779B97F4A7C15
		root := t.TempDir()
		// top-level: dirs a, b, c (Top binds dirs and copies links)
		for _, top := range []string{"a", "b", "c"} {
			os.Mkdir(filepath.Join(root, top), 0o755)
		}
		for i := 0; i < 12; i++ {
			p := filepath.Join(root, pick(&r, []string{"a", "b", "c"}), pick(&r, []string{"a", "b", "c"}))
			if i%3 == 2 {
				p = filepath.Join(p, pick(&r, []string{"a", "b", "c"}))
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			switch pick(&r, []string{"dir", "file", "link", "link", "alink"}) {
			case "dir":
				os.Mkdir(p, 0o755)
			case "file":
				os.WriteFile(p, []byte(p), 0o755)
			case "link":
				os.Symlink(randPath(&r, 1+int(r%4)), p)
			case "alink":
				os.Symlink("/"+randPath(&r, 1+int(r%4)), p)
			}
		}
		rfd, _ := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
		for j := 0; j < 60; j++ {
			p := "/" + pick(&r, []string{"a", "b", "c"}) + "/" + randPath(&r, 1+int(r%5))
			// The kernel answers EAGAIN to a ".." it cannot vouch for
			// while something renames anywhere on the machine: asked
			// again, as its manual says.
			kfd, kerr := unix.Openat2(rfd, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
			for try := 0; kerr == unix.EAGAIN && try < 1000; try++ {
				kfd, kerr = unix.Openat2(rfd, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
			}
			vfd, _, verr := openInRun(root, p, grants(t), nil)
			var ks, vs unix.Stat_t
			if kerr == nil {
				unix.Fstat(kfd, &ks)
				unix.Close(kfd)
			}
			if verr == nil {
				unix.Fstat(vfd, &vs)
				unix.Close(vfd)
			}
			if kerr == nil {
				found++
			}
			if (kerr == nil) != (verr == nil) || kerr == nil && ks.Ino != vs.Ino {
				if mismatches++; mismatches < 10 {
					t.Errorf("seed %d %s: kernel %v (ino %d), view %v (ino %d)", seed, p, kerr, ks.Ino, verr, vs.Ino)
				}
			}
		}
		unix.Close(rfd)
	}
}

// TestCommandLeaksNoDescriptor: every refusal of openInRun and Command
// closes what it opened.
func TestCommandLeaksNoDescriptor(t *testing.T) {
	t.Parallel()
	g0 := viewDir(t, "/var/tmp")
	root := t.TempDir()
	mkfile(t, filepath.Join(root, "usr", "bin", "env"), []byte("x"))
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	for n, target := range map[string]string{"tmp": "/tmp/x", "loop": "loop", "nd": "/usr/bin/env/x", "env": "/usr/bin/env", "up": "../../../../bin/env", "none": "/nonexistent/x", "dir": "/usr"} {
		os.Symlink(target, filepath.Join(g0, n))
	}
	g := grants(t, "fs:"+g0+":rw", "fs:/var/tmp/zz-nonexistent-parent-view/x:ro")
	count := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := count()
	for i := 0; i < 50; i++ {
		for _, rd := range []string{"", root} {
			for _, n := range []string{"tmp", "loop", "nd", "env", "up", "none", "dir", "missing", "env/", "env/.."} {
				Command(CommandLine{Args: []string{g0 + "/" + n}, Cwd: "/", RootDir: rd, Grants: g})
				Command(CommandLine{Args: []string{n}, Cwd: "/", RootDir: rd, Grants: g, Env: map[string]string{"PATH": g0 + ":/var/tmp/zz-nonexistent-parent-view:/tmp"}})
			}
		}
	}
	if after := count(); after > before+2 {
		t.Errorf("fds: %d before, %d after", before, after)
	}
}

// TestATenantWalksNoGrantItMayNotRead: Command runs before the grants are
// authorized (server/stream.go: CommandIn, then Execute's Authorize); the
// view enters a grant only where the tenant may read, so that where links
// inside a grant it will be refused lead is not told.
func TestATenantWalksNoGrantItMayNotRead(t *testing.T) {
	t.Parallel()
	sys := viewDir(t, "/usr/local")
	secret := viewDir(t, "/var/tmp")
	hostTmpDir := t.TempDir() // under /tmp
	os.Symlink(hostTmpDir, filepath.Join(secret, "intmp"))
	os.Mkdir(filepath.Join(secret, "plain"), 0o755)
	depth := strings.Repeat("../", 12)
	os.Symlink(secret+"/intmp/"+depth+"usr/bin/env", filepath.Join(sys, "a"))
	os.Symlink(secret+"/plain/"+depth+"usr/bin/env", filepath.Join(sys, "b"))
	onlySystem := func(p string) error {
		if inSystemDirs(p) {
			return nil
		}
		return errors.New("denied: " + p)
	}
	c := CommandLine{Cwd: "/", Read: func(p string) ([]byte, error) { return readSystem(p, onlySystem) }, Look: onlySystem, Grants: grants(t, "fs:"+secret+":ro")}
	var msgs []string
	for _, n := range []string{"a", "b"} {
		c.Args = []string{filepath.Join(sys, n)}
		_, err := Command(c)
		t.Logf("%s: %v", n, err)
		msgs = append(msgs, strings.ReplaceAll(fmt.Sprint(err), "/"+n, "/NAME"))
	}
	if msgs[0] != msgs[1] {
		t.Errorf("the tenant tells apart where links in %s (a grant it would be refused) lead: %q vs %q", secret, msgs[0], msgs[1])
	}
}

// TestATenantReadsOnlyWhatTheRunsUserCould: the host reads the system
// directories as root; a tenant is told nothing of a file there that a
// run's user (others) could not read: in a directory others may not
// search, a file is as absent as a missing one, and an executable only
// root may read is never its unit (helper-57's finding 5).
func TestATenantReadsOnlyWhatTheRunsUserCould(t *testing.T) {
	t.Parallel()
	priv := viewDir(t, "/opt")
	if err := os.Chmod(priv, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := []byte("#!/bin/sh\n# SECRET=hunter2\n")
	mkfile(t, filepath.Join(priv, "tool"), secret)
	if err := os.WriteFile(filepath.Join(priv, "key.pem"), []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := viewDir(t, "/opt")
	mkfile(t, filepath.Join(open, "mine"), secret)
	if err := os.Chmod(filepath.Join(open, "mine"), 0o711); err != nil {
		t.Fatal(err)
	}
	onlySystem := func(p string) error {
		if inSystemDirs(p) {
			return nil
		}
		return errors.New("denied: " + p)
	}
	c := CommandLine{Cwd: "/", Read: func(p string) ([]byte, error) { return readSystem(p, onlySystem) }, Look: onlySystem}
	told := map[string]string{}
	for _, p := range []string{filepath.Join(priv, "key.pem"), filepath.Join(priv, "absent.pem"), filepath.Join(priv, "tool"), filepath.Join(open, "mine"), filepath.Join(open, "absent")} {
		c.Args = []string{p}
		req, err := Command(c)
		if err == nil || bytes.Contains(req.Image, []byte("hunter2")) {
			t.Errorf("%s: a unit of %d bytes, %v; want it not there", p, len(req.Image), err)
		}
		told[p] = strings.ReplaceAll(fmt.Sprint(err), p, "P")
	}
	if a, b := told[filepath.Join(priv, "key.pem")], told[filepath.Join(priv, "absent.pem")]; a != b {
		t.Errorf("a file in a directory others may not search is told from a missing one: %q vs %q", a, b)
	}
	if a, b := told[filepath.Join(open, "mine")], told[filepath.Join(open, "absent")]; a != b {
		t.Errorf("a file others may not read is told from a missing one: %q vs %q", a, b)
	}
}

// TestARootGrantIsRefusedByTheGuard: a program found beneath a grant of
// "/" is walked relative to the grant (every path there starts with the
// grant's one slash, not two), so the grant reaches the guard, which
// refuses it for the state directory it contains. The view said
// "invalid cross-device link": it handed openat2 the absolute path.
func TestARootGrantIsRefusedByTheGuard(t *testing.T) {
	h := newS1Host(t)
	for _, mode := range []string{"ro", "rw"} {
		g := "fs:/:" + mode
		req, err := Command(CommandLine{Args: []string{"/bin/true"}, Grants: grants(t, g), Cwd: "/"})
		if err != nil {
			t.Fatalf("%s: /bin/true not found beneath it: %v", g, err)
		}
		_, err = h.Run(context.Background(), req)
		var inv interface{ Invalid() bool }
		if err == nil || !strings.Contains(err.Error(), "contains sandbox's state directory") || !errors.As(err, &inv) {
			t.Errorf("%s: %v, want an invalid-grant error naming the state directory it contains", g, err)
		}
	}
}
