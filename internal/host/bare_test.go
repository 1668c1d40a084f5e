package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/bare"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/tier"

	"golang.org/x/sys/unix"
)

// s0Run runs sh -c script at the tier asked (nil: chosen), with gs.
func s0Run(t *testing.T, h *Host, want *tier.Tier, deadline time.Duration, script string, gs ...string) (*Run, string, error) {
	t.Helper()
	req, err := Command(CommandLine{Args: []string{"sh", "-c", script}, Grants: grants(t, gs...), Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	req.Tier, req.Deadline = want, deadline
	var out bytes.Buffer
	req.Stdout = &out
	r, err := h.Run(context.Background(), req)
	return r, out.String(), err
}

// TestS0OnlyOnExplicitRequest: a native unit runs at S1 unless S0 is
// asked for; at S0 it runs as a host process (it sees the host's
// files), its attestation says it was not confined, and it verifies.
func TestS0OnlyOnExplicitRequest(t *testing.T) {
	h := newS1Host(t)
	h.Executors = append(h.Executors, bare.Executor{})
	r, _, err := s0Run(t, h, nil, 0, "true")
	if err != nil || r.Choice.Chosen != tier.S1 {
		t.Fatalf("unasked: %+v %v", r.Choice, err)
	}
	s0 := tier.S0
	r, out, err := s0Run(t, h, &s0, 0, "test -r "+h.Store.Dir.Root+" && echo host state visible; exit 4")
	if err != nil {
		t.Fatal(err)
	}
	c := r.Attestation.Claim
	if c.Tier.Chosen != tier.S0 || c.Executor != "bare" || c.Outcome.ExitCode == nil || *c.Outcome.ExitCode != 4 || out != "host state visible\n" {
		t.Fatalf("%+v %q", c, out)
	}
	if !strings.Contains(strings.Join(c.Notes, "\n"), "nothing confined it") {
		t.Fatalf("notes: %v", c.Notes)
	}
	for _, v := range verifyRun(t, h, r.Dir) {
		if v.Err != nil {
			t.Fatalf("%s: %v", v.Path, v.Err)
		}
	}
}

// TestS0RefusesGrantsItCannotHonour: an exec list, an injected
// credential, a storage quota: S0 restricts nothing, so each is refused
// before anything runs, never silently ignored.
func TestS0RefusesGrantsItCannotHonour(t *testing.T) {
	h := newS1Host(t)
	h.Executors = append(h.Executors, bare.Executor{})
	s0 := tier.S0
	dir := t.TempDir()
	inject := grants(t, "net:example.com:443")
	if err := inject.Inject("example.com:Authorization=env:TOKEN"); err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]grant.Set{
		"exec list": grants(t, "exec:deny:b3:"+strings.Repeat("0", 64)),
		"quota":     grants(t, "fs:"+dir+":rw:quota=1MiB"),
		"inject":    inject,
	} {
		req, err := Command(CommandLine{Args: []string{"sh", "-c", "touch " + dir + "/ran"}, Grants: g, Cwd: "/"})
		if err != nil {
			t.Fatal(err)
		}
		req.Tier = &s0
		var re *bare.RefusedError
		if _, err := h.Run(context.Background(), req); !errors.As(err, &re) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, _, err := s0Run(t, h, &s0, 0, "test -e "+dir+"/ran && exit 1; exit 0"); err != nil {
		t.Fatal(err)
	}
}

// TestS0IsMeteredByItsCgroup: the program and every process it starts
// run in the run's cgroup (it is stopped at its first instruction until
// it is placed), so the receipt's CPU time is theirs.
func TestS0IsMeteredByItsCgroup(t *testing.T) {
	h := newS1Host(t)
	if h.Cgroups == nil {
		t.Skip("no cgroups here")
	}
	h.Executors = append(h.Executors, bare.Executor{})
	s0 := tier.S0
	// A child that burns CPU at once, before the parent waits, and then
	// says how much it used (utime and stime, in clock ticks).
	r, out, err := s0Run(t, h, &s0, 0, `sh -c 'i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; cut -d" " -f14,15 /proc/$$/stat' & wait`)
	if err != nil {
		t.Fatal(err)
	}
	var ut, st int
	if _, err := fmt.Sscan(out, &ut, &st); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	child := (ut + st) * 10_000 // µs, at 100 ticks a second
	var basis string
	for _, d := range r.Receipt.Devices {
		for _, rd := range d.Readings {
			if strings.Contains(rd.Basis, "of the run's group") {
				basis = rd.Basis
			}
		}
	}
	m := regexp.MustCompile(`run CPU (\d+) µs`).FindStringSubmatch(basis)
	if m == nil {
		t.Fatalf("no CPU time from the run's cgroup: %+v", r.Receipt.Devices)
	}
	if us, _ := strconv.Atoi(m[1]); child < 100_000 || us < child-20_000 {
		t.Fatalf("the run's cgroup counted %d µs, the child used %d µs: it escaped the group (%s)", us, child, basis)
	}
	if r.Result.Outcome.Status != attest.Exited {
		t.Fatalf("%+v", r.Result.Outcome)
	}
}

// TestS0DeadlineEndsTheWholeGroup: at its deadline the program and what
// it started are killed, and the run is sealed as such.
func TestS0DeadlineEndsTheWholeGroup(t *testing.T) {
	h := newS1Host(t)
	h.Executors = append(h.Executors, bare.Executor{})
	s0 := tier.S0
	r, _, err := s0Run(t, h, &s0, 300*time.Millisecond, "sleep 311 & sleep 312")
	if err != nil {
		t.Fatal(err)
	}
	if r.Result.Outcome.Status != attest.Deadline {
		t.Fatalf("%+v", r.Result.Outcome)
	}
	for _, s := range []string{"sleep 311", "sleep 312"} {
		if l := processesWith(t, s); len(l) > 0 {
			t.Fatalf("left running: %v", l)
		}
	}
}

// TestCommandReadsTheProgramOnce: a command named by its path is read
// once, to sniff what it is and as the unit's image; one found in PATH
// in the system directories is read where it was found, as the run will
// find it (readInRun), not again through the caller's reader.
func TestCommandReadsTheProgramOnce(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"/bin/true", "true"} {
		reads := map[string]int{}
		read := func(p string) ([]byte, error) {
			reads[p]++
			return readRegular(p)
		}
		req, err := Command(CommandLine{Args: []string{arg}, Cwd: "/", Read: read})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(req.Entry)
		if !bytes.Equal(req.Image, want) || req.Kind != tier.Native {
			t.Errorf("%s: a %v unit of %d bytes, want the %d of %s", arg, req.Kind, len(req.Image), len(want), req.Entry)
		}
		if want := map[string]int{req.Entry: 1}; arg == "true" && len(reads) != 0 || arg != "true" && !maps.Equal(reads, want) {
			t.Errorf("%s: read %v through the reader", arg, reads)
		}
	}
}

// TestCommandInAnImageIsTheImages: in an image's root, a program named
// by a path no storage grant covers is the image's file: the host's file
// at that path is not read (a module there is not what runs; a tenant's
// reader that may not read it does not refuse the run), and what is not
// a regular file in the image is refused, not waited on.
func TestCommandInAnImageIsTheImages(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app"), 0o755)
	script := []byte("#!/bin/sh\necho from the image\n")
	if err := os.WriteFile(filepath.Join(root, "app", "run.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "app", "fifo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "app", "m.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func(string) ([]byte, error){
		"a module on the host":         func(string) ([]byte, error) { return []byte("\x00asm\x01\x00\x00\x00"), nil },
		"a tenant who may not read it": func(p string) ([]byte, error) { return nil, fmt.Errorf("%s: %w", p, grant.ErrDenied) },
	} {
		reads := 0
		counted := func(p string) ([]byte, error) { reads++; return read(p) }
		req, err := Command(CommandLine{Args: []string{"/app/run.sh", "x"}, Cwd: "/", RootDir: root, Read: counted})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if req.Kind != tier.Native || req.Entry != "/app/run.sh" || !bytes.Equal(req.Image, script) || reads != 0 {
			t.Errorf("%s: a %v unit of %s (%q), the host read %d times; want the image's script, the host not read", name, req.Kind, req.Entry, req.Image, reads)
		}
	}
	// The path looked at is the path read and run: through .. into a
	// storage grant, the host's file under the grant, as the run sees it.
	granted := t.TempDir()
	hosts := []byte("#!/bin/sh\necho from the grant\n")
	if err := os.WriteFile(filepath.Join(granted, "x"), hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	req, err := Command(CommandLine{Args: []string{"/app/.." + granted + "/x"}, Cwd: "/", RootDir: root, Grants: grants(t, "fs:"+granted+":ro"), Read: readRegular})
	if err != nil || req.Entry != filepath.Join(granted, "x") || !bytes.Equal(req.Image, hosts) {
		t.Errorf("a path through .. into a grant, from an image: %+v %v", req.Entry, err)
	}
	// A module in the image is not run as a native program.
	if _, err := Command(CommandLine{Args: []string{"/app/m.wasm"}, Cwd: "/", RootDir: root, Read: readRegular}); err == nil || !strings.Contains(err.Error(), "/app/m.wasm in the image is a WebAssembly module") {
		t.Errorf("a module in the image: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Command(CommandLine{Args: []string{"/app/fifo"}, Cwd: "/", RootDir: root, Read: readRegular})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "/app/fifo in the image is not a regular file") {
			t.Errorf("a FIFO in the image: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a FIFO in the image held the request")
	}
}

// TestImageLinksIntoTheRunsOwnAreRefused: a program in an image whose
// symlinks lead into a directory the run has of its own (its /tmp, /proc,
// /dev, ...) is refused, not read from the image's copy there: the run
// would execute another file (its own /tmp's, which an earlier exec of a
// live sandbox may have planted) than the one its unit names.
func TestImageLinksIntoTheRunsOwnAreRefused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"app", "tmp", "dev", "usr/bin"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	script := []byte("#!/bin/sh\necho the image's copy\n")
	for _, f := range []string{"tmp/evil", "dev/evil", "usr/bin/good"} {
		if err := os.WriteFile(filepath.Join(root, f), script, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{
		"app/abs":   "/tmp/evil",
		"app/rel":   "../tmp/evil",
		"app/dots":  "/usr/../tmp/evil",
		"app/dev":   "/dev",
		"app/good":  "/usr/bin/good",
		"usr/bin/x": "../../tmp/evil",
	} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"/app/abs"}, {"/app/rel"}, {"/app/dots"}, {"/app/dev/evil"}, {"/usr/bin/x"}} {
		_, err := Command(CommandLine{Args: args, Cwd: "/", RootDir: root, Read: readRegular})
		var pe *ProgramError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "a run has its own") {
			t.Errorf("%v, led into the run's own: %v, want it refused", args, err)
		}
	}
	// Looked up in PATH, such a link is not a command there.
	_, err := Command(CommandLine{Args: []string{"x"}, Cwd: "/", RootDir: root, Env: map[string]string{"PATH": "/usr/bin"}, Read: readRegular})
	if pe := (*ProgramError)(nil); !errors.As(err, &pe) || !pe.NotFound {
		t.Errorf("x in PATH, led into the run's own /tmp: %v, want it not found", err)
	}
	req, err := Command(CommandLine{Args: []string{"/app/good"}, Cwd: "/", RootDir: root, Read: readRegular})
	if err != nil || !bytes.Equal(req.Image, script) {
		t.Fatalf("a link that stays in the image: %v", err)
	}

	// The image's own tmp is itself a link (tmp -> var/tmp): the run's
	// /tmp is still its own, so a path through it is refused, however
	// the image's links make it look elsewhere.
	linked := t.TempDir()
	os.MkdirAll(filepath.Join(linked, "var", "tmp"), 0o755)
	os.MkdirAll(filepath.Join(linked, "app"), 0o755)
	os.WriteFile(filepath.Join(linked, "var", "tmp", "evil"), script, 0o755)
	os.Symlink("var/tmp", filepath.Join(linked, "tmp"))
	os.Symlink("/tmp/evil", filepath.Join(linked, "app", "x"))
	os.Symlink("/tmp", filepath.Join(linked, "bin"))
	for _, p := range []string{"/app/x", "/bin/evil"} {
		_, err := Command(CommandLine{Args: []string{p}, Cwd: "/", RootDir: linked, Read: readRegular})
		if pe := (*ProgramError)(nil); !errors.As(err, &pe) || !strings.Contains(err.Error(), "a run has its own /tmp") {
			t.Errorf("%s through an image whose tmp is a link: %v, want it refused", p, err)
		}
	}

	// A link into a storage grant leads, in the run, to the host's file
	// under the grant, not to the image's copy at that path (a grant
	// outside /tmp, which is the run's own before any grant under it).
	granted, err := os.MkdirTemp("/var/tmp", "grant-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(granted) })
	os.WriteFile(filepath.Join(granted, "x"), []byte("#!/bin/sh\necho the host's\n"), 0o755)
	os.MkdirAll(filepath.Join(root, granted), 0o755)
	os.WriteFile(filepath.Join(root, granted, "x"), script, 0o755)
	os.Symlink(filepath.Join(granted, "x"), filepath.Join(root, "app", "y"))
	_, err = Command(CommandLine{Args: []string{"/app/y"}, Cwd: "/", RootDir: root, Grants: grants(t, "fs:"+granted+":ro"), Read: readRegular})
	if pe := (*ProgramError)(nil); !errors.As(err, &pe) || !strings.Contains(err.Error(), "storage grant "+granted) {
		t.Errorf("a link into a storage grant: %v, want it refused", err)
	}
}

// TestRelativePathEntriesAreSkipped: a command is never found through an
// empty or relative PATH entry, which names a directory relative to where
// a process stands: in an image, the host would look in the image's root
// while the run executed, from its working directory, a file it may
// have planted; on the host, it would look where the service stands.
func TestRelativePathEntriesAreSkipped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.WriteFile(filepath.Join(root, "bin", "prog"), []byte("#!/bin/sh\n"), 0o755)
	for _, path := range []string{"bin", "./bin", "", ":bin", "bin/../bin"} {
		_, err := Command(CommandLine{Args: []string{"prog"}, Cwd: "/", RootDir: root, Env: map[string]string{"PATH": path}, Read: readRegular})
		if pe := (*ProgramError)(nil); !errors.As(err, &pe) || !pe.NotFound {
			t.Errorf("PATH %q in an image: %v, want prog not found", path, err)
		}
	}
	if req, err := Command(CommandLine{Args: []string{"prog"}, Cwd: "/", RootDir: root, Env: map[string]string{"PATH": "bin:/bin"}, Read: readRegular}); err != nil || req.Entry != "/bin/prog" {
		t.Fatalf("PATH with an absolute entry after a relative one: %+v %v", req.Entry, err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "prog"), []byte("#!/bin/sh\n"), 0o755)
	if _, err := Command(CommandLine{Args: []string{"prog"}, Cwd: dir, Grants: grants(t, "fs:"+dir+":ro"), Env: map[string]string{"PATH": "."}, Read: readRegular}); err == nil {
		t.Fatalf("PATH . on the host found a program")
	}
}
