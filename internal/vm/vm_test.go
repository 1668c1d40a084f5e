//go:build linux

package vm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
	"github.com/opensubstrate/sandbox/tier"
)

// image is the guest image the tests boot, with init (the agent when "").
func image(t testing.TB, init string) *boot.Image {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("QEMU is missing: run scripts/vm-image (scripts/deps does): %v", err)
	}
	var agent string
	var err error
	if init == "" {
		agent, err = guestbuild.VMAgent()
	} else {
		agent, err = guestbuild.VMInit(init)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir, err := guestbuild.VMImage(agent)
	if err != nil {
		t.Fatal(err)
	}
	im, err := boot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// jail is the helper QEMU starts through (sandbox's S1 helper).
func jail(t testing.TB) string {
	t.Helper()
	p, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// shares holds ms (their host directories at the same paths) as a run's
// shares are held, under an empty guard; they are closed at the test's end.
func shares(t testing.TB, ms ...wire.Mount) []Share {
	t.Helper()
	var out []Share
	for _, m := range ms {
		sh, err := hold(hostpath.Guard{}, m, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sh.Close() })
		out = append(out, sh)
	}
	return out
}

func start(t testing.TB, spec Spec) *Machine {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	if spec.MemoryMiB == 0 {
		spec.MemoryMiB = 256
	}
	if spec.Accel == "" {
		spec.Accel = "tcg"
	}
	if spec.Jail == "" {
		spec.Jail = jail(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), BootTimeout)
	defer cancel()
	m, err := Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Kill)
	return m
}

// TestGuestRunsCommandsAndMovesFiles boots the real guest: its own
// kernel, a command with stdin and both output streams and its exit
// status, files both ways, a grant read-write and one read-only.
func TestGuestRunsCommandsAndMovesFiles(t *testing.T) {
	im := image(t, "")
	rw, ro := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(ro, "given"), []byte("from the host"), 0o644)
	t0 := time.Now()
	m := start(t, Spec{Image: im, Shares: shares(t, wire.Mount{Tag: "sys0", Path: "/usr", ReadOnly: true}, wire.Mount{Tag: "g0", Path: rw}, wire.Mount{Tag: "g1", Path: ro, ReadOnly: true})})
	t.Logf("boot to ready: %v", time.Since(t0))
	if m.Hello.Kernel != im.Manifest.Release {
		t.Fatalf("guest kernel %q, want %q", m.Hello.Kernel, im.Manifest.Release)
	}
	jailed(t, m.Pid(), rw)
	ctx := context.Background()
	var out, errb bytes.Buffer
	st, err := m.Exec(ctx, wire.Command{Path: "/usr/bin/sh", Argv: []string{"sh", "-c", "uname -r; tr a-z A-Z; echo oops >&2; cat " + ro + "/given; echo made > " + rw + "/made; exit 7"}, Dir: "/"},
		strings.NewReader("shout\n"), &out, &errb, time.Second)
	if err != nil || st.Code != 7 {
		t.Fatalf("exec: %+v %v (stderr %q)", st, err, errb.String())
	}
	if want := im.Manifest.Release + "\nSHOUT\nfrom the host"; out.String() != want || errb.String() != "oops\n" {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "made")); string(b) != "made\n" {
		t.Fatalf("a write into the rw grant reached the host as %q", b)
	}
	st, _ = m.Exec(ctx, wire.Command{Path: "/usr/bin/sh", Argv: []string{"sh", "-c", "echo x > " + ro + "/no"}, Dir: "/"}, nil, nil, nil, time.Second)
	if st.Code == 0 {
		t.Fatal("a write into the read-only grant succeeded")
	}
	// The guest's /tmp is every user's and sticky, as every /tmp: no one
	// removes or renames another's file in it.
	out.Reset()
	if st, err := m.Exec(ctx, wire.Command{Path: "/usr/bin/stat", Argv: []string{"stat", "-c", "%a", "/tmp"}, Dir: "/"}, nil, &out, nil, time.Second); err != nil || st.Code != 0 || strings.TrimSpace(out.String()) != "1777" {
		t.Errorf("the guest's /tmp: mode %q (%+v %v), want 1777", out.String(), st, err)
	}
	// A process a program leaves behind ends as the agent's child (it is
	// PID 1), and is waited for: no zombie stays.
	st, _ = m.Exec(ctx, wire.Command{Path: "/usr/bin/sh", Argv: []string{"sh", "-c", "(/usr/bin/sleep 0.2; exit 0) & exit 0"}, Dir: "/"}, nil, nil, nil, time.Second)
	out.Reset()
	st, err = m.Exec(ctx, wire.Command{Path: "/usr/bin/sh", Argv: []string{"sh", "-c", "/usr/bin/sleep 1; cat /proc/[0-9]*/stat 2>/dev/null | grep -c ') Z '"}, Dir: "/"}, nil, &out, nil, 5*time.Second)
	if err != nil || strings.TrimSpace(out.String()) != "0" {
		t.Fatalf("zombies in the guest: %q %+v %v", out.String(), st, err)
	}
	// Paused through QMP and let go again, it answers as before.
	if err := errors.Join(m.pause(ctx), m.resume(ctx)); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several frames
	if err := m.WriteFile(ctx, "/tmp/big", big, 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := m.ReadFile(ctx, "/tmp/big", 8<<20)
	if err != nil || !bytes.Equal(back, big) {
		t.Fatalf("read back %d bytes, %v", len(back), err)
	}
	if _, err := m.ReadFile(ctx, "/tmp/big", 1<<20); err == nil {
		t.Fatal("a read over its limit was not refused")
	}
	if _, err := m.ReadFile(ctx, "/nonexistent", 1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	st, err = m.Exec(ctx, wire.Command{Path: "/nonexistent", Argv: []string{"x"}, Dir: "/"}, nil, nil, nil, time.Second)
	if err != nil || st.Error == "" || st.Errno != 2 {
		t.Fatalf("a missing program: %+v %v", st, err)
	}
}

// TestProbeEarnsTheRung runs the probe: a guest that booted its own
// kernel and, from inside, saw no host process or file and only its
// grants, its QEMU jailed; the accelerator said with the reason.
func TestProbeEarnsTheRung(t *testing.T) {
	im := image(t, "")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), KVM: filepath.Join(t.TempDir(), "no-kvm"), Jail: jail(t)})[0]
	p := e.Probe(context.Background())
	if !p.Available {
		t.Fatalf("probe: %+v", p)
	}
	for _, l := range p.Layers {
		if !l.OK {
			t.Errorf("layer %s: %s", l.Name, l.Detail)
		}
	}
	if len(p.Layers) != 6 {
		t.Fatalf("layers: %+v", p.Layers)
	}
	// Without the jail, QEMU would run as root with every capability:
	// the rung is refused, saying so.
	bare := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg"})[0]
	if p := bare.Probe(context.Background()); p.Available || !strings.Contains(p.Reason, "no jail helper") {
		t.Fatalf("probe without a jail: %+v", p)
	}
	accel, why := e.accelerator(context.Background(), im)
	if accel != "tcg" || !strings.Contains(why, "no-kvm") {
		t.Fatalf("accelerator %q (%s), want tcg for a missing KVM device", accel, why)
	}
	if !strings.HasSuffix(e.executorName(accel), "+tcg") {
		t.Fatalf("name %q", e.executorName(accel))
	}
}

// TestProbeRefusesWithoutItsParts: no QEMU, no image: unavailable, and
// the reason names what is missing.
func TestProbeRefusesWithoutItsParts(t *testing.T) {
	e := New(Config{ImageDir: t.TempDir(), QEMU: "/nonexistent/qemu"})[0]
	if p := e.Probe(context.Background()); p.Available || !strings.Contains(p.Reason, "QEMU is not installed") {
		t.Fatalf("no QEMU: %+v", p)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatalf("QEMU is missing: run scripts/vm-image (scripts/deps does): %v", err)
	}
	e = New(Config{ImageDir: t.TempDir()})[0]
	if p := e.Probe(context.Background()); p.Available || !strings.Contains(p.Reason, "sandbox vm build") {
		t.Fatalf("no image: %+v", p)
	}
}

// TestImageRefusedByAddressBeforeBoot: a kernel or initramfs that is
// missing or differs by one byte from its address is refused, naming it,
// and no QEMU starts.
func TestImageRefusedByAddressBeforeBoot(t *testing.T) {
	im := image(t, "")
	for _, tc := range []struct {
		name, file, want string
		corrupt          bool
	}{
		{"corrupt kernel", "kernel", "the kernel at", true},
		{"corrupt initramfs", "initrd", "the initramfs at", true},
		{"missing kernel", "kernel", "the kernel " + im.Manifest.Kernel.String() + " is not here", false},
		{"missing initramfs", "initrd", "the initramfs " + im.Manifest.Initrd.String() + " is not here", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range []string{im.Kernel, im.Initrd, filepath.Join(filepath.Dir(im.Kernel), boot.ManifestName)} {
				b, _ := os.ReadFile(p)
				os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644)
			}
			target := filepath.Join(dir, filepath.Base(im.Kernel))
			if tc.file == "initrd" {
				target = filepath.Join(dir, filepath.Base(im.Initrd))
			}
			if tc.corrupt {
				b, _ := os.ReadFile(target)
				b[len(b)/2] ^= 1
				os.WriteFile(target, b, 0o644)
			} else {
				os.Remove(target)
			}
			e := New(Config{ImageDir: dir, QEMU: "/nonexistent/qemu-must-not-start"})[0]
			_, err := e.Run(context.Background(), nativeJob("/usr/bin/true"))
			if !errors.Is(err, boot.ErrImage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func nativeJob(prog string, args ...string) *executor.Job {
	return &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: prog, Args: append([]string{prog}, args...)}, Grants: grant.Set{Kernel: true}}
}

// TestAgentThatNeverAnswersIsEndedByTheDeadline: a guest whose init never
// says hello is ended by the run's deadline, and the run says so.
func TestAgentThatNeverAnswersIsEndedByTheDeadline(t *testing.T) {
	im := image(t, "hang")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg"})[0]
	j := nativeJob("/usr/bin/true")
	j.Deadline = 4 * time.Second
	res, err := e.Run(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	// The boot's own bound (minutes) would end it failed, not deadline.
	if res.Outcome.Status != attest.Deadline || !strings.Contains(res.Outcome.Detail, "before the guest was ready") {
		t.Fatalf("outcome %+v", res.Outcome)
	}
	noQEMULeft(t)
}

// TestGuestKernelPanicIsReported: a guest whose init exits panics its
// kernel; the VM powers off and the run is trapped, naming the panic.
func TestGuestKernelPanicIsReported(t *testing.T) {
	im := image(t, "exit")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg"})[0]
	res, err := e.Run(context.Background(), nativeJob("/usr/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != attest.Trapped || !strings.Contains(res.Outcome.Detail, "Kernel panic") {
		t.Fatalf("outcome %+v", res.Outcome)
	}
	noQEMULeft(t)
}

// TestLyingAgentEndsItsVM: a guest that sends a frame only the host may
// send, on a stream nobody opened, is refused as hostile; the run fails
// naming it and the VM is gone.
func TestLyingAgentEndsItsVM(t *testing.T) {
	im := image(t, "liar")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg"})[0]
	res, err := e.Run(context.Background(), nativeJob("/usr/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != attest.Failed || !strings.Contains(res.Outcome.Detail, "broke the protocol") {
		t.Fatalf("outcome %+v", res.Outcome)
	}
	noQEMULeft(t)
}

// jailed checks, from the host, that QEMU (pid) runs in the VM jail:
// three capabilities in its bounding set, no_new_privs, the jail's
// seccomp filter under QEMU's own, a mount namespace of its own in which
// the host's root and /proc are read-only and rw (a read-write grant) is
// mounted nowhere: QEMU has it by descriptor only.
func jailed(t *testing.T, pid int, rw string) {
	t.Helper()
	m, err := readMonitor(pid)
	if err != nil {
		t.Fatal(err)
	}
	// DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER: bits 1, 2, 3.
	if m.CapBnd != "000000000000000e" || m.NoNewPrivs != "1" || m.Filters != "2" || !m.OwnMountNS {
		t.Fatalf("QEMU is not in the jail (bounding set 0e, no_new_privs, 2 seccomp filters, its own mount namespace wanted): %+v", m)
	}
	for mp, want := range map[string]bool{"/": true, "/proc": true} {
		if o, ok := m.Mounts[mp]; !ok || readOnly(o) != want {
			t.Errorf("in QEMU's mount namespace %s is mounted %q, want read-only %v", mp, o, want)
		}
	}
	if o, ok := m.Mounts[rw]; ok {
		t.Errorf("in QEMU's mount namespace the read-write grant %s is mounted (%q): it should come by descriptor only", rw, o)
	}
}

// noQEMULeft: no QEMU this test process started runs any more (other
// packages' tests boot the same kernel at the same time).
func noQEMULeft(t *testing.T) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; a zombie has ended, and is being waited for
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i > 0 && len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) && bytes.Contains(b[:i], []byte("(qemu")) {
			t.Fatalf("QEMU still runs: pid %s", e.Name())
		}
	}
}

// TestSnapshotKeepsResidentState suspends a running guest to a memory
// image and resumes it in a new QEMU: a process started before the
// snapshot still runs after it, and what it held in memory is there.
func TestSnapshotKeepsResidentState(t *testing.T) {
	im := image(t, "")
	// No 9p share: QEMU refuses to migrate a guest with one mounted.
	spec := Spec{Image: im, MemoryMiB: 512}
	m := start(t, spec)
	ctx := context.Background()
	sh := boot.ToolDir + "/sh"
	if st, err := m.Exec(ctx, wire.Command{Path: sh, Argv: []string{"sh", "-c", "echo resident > /tmp/state; (sleep 1000 & echo $! > /tmp/pid)"}, Env: []string{"PATH=" + boot.ToolDir}, Dir: "/"}, nil, nil, nil, time.Second); err != nil || st.Code != 0 {
		t.Fatalf("%+v %v", st, err)
	}
	path := filepath.Join(t.TempDir(), "memory")
	t0 := time.Now()
	snap, err := m.Snapshot(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	m.Kill()
	t.Logf("snapshot of a 512 MiB guest: %d bytes in %v", snap.Size, took)
	spec.Dir = t.TempDir()
	spec.Incoming = path
	t0 = time.Now()
	r := start(t, spec)
	t.Logf("restore: %v", time.Since(t0))
	var out bytes.Buffer
	st, err := r.Exec(ctx, wire.Command{Path: sh, Argv: []string{"sh", "-c", "cat /tmp/state; kill -0 $(cat /tmp/pid) && echo alive"}, Env: []string{"PATH=" + boot.ToolDir}, Dir: "/"}, nil, &out, nil, time.Second)
	if err != nil || st.Code != 0 || out.String() != "resident\nalive\n" {
		t.Fatalf("after restore: %+v %v %q", st, err, out.String())
	}
}

// TestKVMThatDoesNotBootFallsBackToTCG: a KVM device that opens but on
// which no guest boots (here: QEMU finds no /dev/kvm of its own) is not
// trusted: runs use TCG, and the reason says KVM was tried.
func TestKVMThatDoesNotBootFallsBackToTCG(t *testing.T) {
	im := image(t, "")
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this machine has /dev/kvm: the fallback is tried where it has none")
	}
	kvm := filepath.Join(t.TempDir(), "kvm")
	os.WriteFile(kvm, nil, 0o600)
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), KVM: kvm})[0]
	accel, why := e.accelerator(context.Background(), im)
	if accel != "tcg" || !strings.Contains(why, "did not boot under it") {
		t.Fatalf("accelerator %q (%s)", accel, why)
	}
	if note := e.accelNote(accel, why); !strings.Contains(note, "TCG") || strings.Contains(note, "KVM (hardware") {
		t.Fatalf("note %q", note)
	}
}

// TestDeadlineEndsARunningProgram: a deadline that passes while the
// program runs ends the VM, and the run says so.
func TestDeadlineEndsARunningProgram(t *testing.T) {
	im := image(t, "")
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg"})[0]
	// The deadline covers the boot: where the machine is so busy that the
	// boot outlasts it, the run ends before its program starts (also a
	// deadline, said so), and the test tries again with twice the time.
	// A boot took 2 s here, 5 s on a busy machine.
	for d := 10 * time.Second; ; d *= 2 {
		j := nativeJob("/usr/bin/sleep", "1000")
		j.Deadline = d
		res, err := e.Run(context.Background(), j)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome.Status == attest.Deadline && strings.Contains(res.Outcome.Detail, "before the guest was ready") && d < TCGBootTimeout {
			t.Logf("the boot outlasted a %v deadline; again with %v", d, 2*d)
			continue
		}
		if res.Outcome.Status != attest.Deadline || !strings.Contains(res.Outcome.Detail, "the VM was ended") {
			t.Fatalf("outcome %+v", res.Outcome)
		}
		break
	}
	noQEMULeft(t)
}
