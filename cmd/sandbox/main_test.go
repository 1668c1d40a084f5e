package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/native"
)

// The tests run in parallel (each has its own state directories, and
// the processes it waits for are named by markers of its own), except
// those that set the environment (the S5 ones, which name the guest
// image so) and the rootless ones, which run as one shared unprivileged
// user. Much of their time is spent waiting on the programs they start.
func TestMain(m *testing.M) {
	if code, ok := native.Helper(); ok {
		os.Exit(code)
	}
	if code, ok := asCLI(); ok {
		os.Exit(code)
	}
	code := m.Run()
	if probed.home != "" {
		os.RemoveAll(probed.home)
	}
	os.Exit(code)
}

// sandbox runs the CLI in-process with a fresh state directory.
func sandbox(t *testing.T, home string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), append([]string{"--home", home}, args...), &o, &e)
	return o.String(), e.String(), code
}

func TestVectorsGenAndVerify(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	out, errOut, code := sandbox(t, home, "vectors", "gen", dir)
	if code != 0 || !strings.Contains(out, "wrote") {
		t.Fatalf("gen: %d %s %s", code, out, errOut)
	}
	out, _, code = sandbox(t, home, "vectors", "verify", dir)
	if code != 0 || !strings.Contains(out, "0 failed") {
		t.Fatalf("verify: %d\n%s", code, out)
	}
	// A tampered pack fails.
	p := filepath.Join(dir, "positive", "run", "grants.json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte("/work"), []byte("/wark"), 1), 0o644)
	out, _, code = sandbox(t, home, "vectors", "verify", dir)
	if code != 4 || !strings.Contains(out, "FAIL  pack  "+dir+": address: positive/run/grants.json") {
		t.Fatalf("tampered pack: %d\n%s", code, out)
	}
}

func TestVerifyExitCodes(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	sandbox(t, home, "vectors", "gen", dir)
	trust := filepath.Join(dir, "keys", "test-key.pub")
	run := filepath.Join(dir, "positive", "run")
	tests := []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"trusted run", []string{"verify", "--trust", trust, run}, 0, "OK    receipt"},
		{"untrusted run", []string{"verify", run}, 5, "untrusted-key"},
		{"trusted by literal key", []string{"verify", "--trust", "ed25519:d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", run}, 0, "OK    attestation"},
		{"negative", []string{"verify", "--trust", trust, filepath.Join(dir, "negative", "attestation-float.json")}, 4, "FAIL  attestation"},
		{"mixed", []string{"verify", "--trust", trust, run, filepath.Join(dir, "negative", "receipt-truncated.cose")}, 4, "truncated"},
		{"bad trust", []string{"verify", "--trust", "ed25519:zz", run}, 2, ""},
		{"missing", []string{"verify", "--trust", trust, filepath.Join(dir, "nope")}, 3, "FAIL"},
		{"no args", []string{"verify"}, 2, ""},
	}
	for _, tc := range tests {
		out, errOut, code := sandbox(t, home, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%s: exit %d (want %d)\n%s%s", tc.name, code, tc.code, out, errOut)
		}
	}
}

func TestKeyAndHash(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	out, _, code := sandbox(t, home, "key")
	if code != 0 || !strings.HasPrefix(out, "public  ed25519:") || !strings.Contains(out, "id      b3:") {
		t.Fatalf("key: %d %s", code, out)
	}
	pub, _, _ := sandbox(t, home, "key", "--public")
	if !strings.Contains(out, strings.TrimSpace(pub)) {
		t.Fatalf("key --public %q not in %q", pub, out)
	}
	fi, err := os.Stat(filepath.Join(home, "host.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("host.key: %v %v", fi, err)
	}
	f := filepath.Join(home, "f")
	os.WriteFile(f, []byte("abc"), 0o600)
	out, _, code = sandbox(t, home, "hash", f)
	if code != 0 || out != "b3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85  "+f+"\n" {
		t.Fatalf("hash: %d %q", code, out)
	}
}

func TestGrantsCommand(t *testing.T) {
	t.Parallel()
	out, _, code := sandbox(t, t.TempDir(), "grants", "--grant", "cpu:5J", "--grant", "kv:cache:rw")
	if code != 0 || !strings.Contains(out, `"budget_uj":5000000`) || !strings.Contains(out, "\nb3:") {
		t.Fatalf("grants: %d %s", code, out)
	}
	_, errOut, code := sandbox(t, t.TempDir(), "grants", "--grant", "net:example.com")
	if code != 2 || !strings.Contains(errOut, `grant "net:example.com": field host:port`) {
		t.Fatalf("bad grant: %d %s", code, errOut)
	}
}

// guestPath is the test guest name, built. hello, cat and spin are
// their C builds, which behave the same as the Go ones: a module of
// kilobytes, compiled by each test's fresh state directory in a moment,
// where the Go build's megabytes take seconds each time (tens of them
// under the race detector). The others are Go programs.
func guestPath(t testing.TB, name string) string {
	t.Helper()
	switch name {
	case "hello", "cat", "spin":
	default:
		return goGuestPath(t, name)
	}
	p, err := guestbuild.C(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goGuestPath is the Go build of test guest name, where a test needs
// its size.
func goGuestPath(t testing.TB, name string) string {
	t.Helper()
	p, err := guestbuild.Go(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunEndToEnd(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	work := t.TempDir()
	os.WriteFile(filepath.Join(work, "in.txt"), []byte("granted\n"), 0o644)

	out, errOut, code := sandbox(t, home, "run", "--grant", "fs:"+work+":ro", "--", guestPath(t, "cat"), filepath.Join(work, "in.txt"))
	if code != 0 || out != "granted\n" {
		t.Fatalf("run: %d %q %q", code, out, errOut)
	}
	for _, want := range []string{"sandbox: run    b3:", "sandbox: tier   S2 Sandbox", "sandbox: fuel", "sandbox: energy Cpu", "ModelBased wasm-fuel/1", "sandbox: records "} {
		if !strings.Contains(errOut, want) {
			t.Errorf("summary lacks %q:\n%s", want, errOut)
		}
	}
	// The guest's status passes through.
	_, errOut, code = sandbox(t, home, "run", "-q", "--", guestPath(t, "cat"), "/etc/passwd")
	if code != 1 || !strings.Contains(strings.ToLower(errOut), "permission denied") {
		t.Fatalf("denied read: %d %q", code, errOut)
	}
	_, _, code = sandbox(t, home, "run", "-q", "--deadline", "300ms", "--", guestPath(t, "spin"))
	if code != 124 {
		t.Fatalf("deadline exit %d, want 124", code)
	}
	_, _, code = sandbox(t, home, "run", "-q", "--grant", "cpu:100mJ", "--", guestPath(t, "spin"))
	if code != 124 {
		t.Fatalf("out-of-fuel exit %d, want 124", code)
	}

	out, _, code = sandbox(t, home, "runs")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 4 || !strings.Contains(lines[0], "out-of-fuel") || !strings.Contains(lines[3], "exited 0") {
		t.Fatalf("runs: %d\n%s", code, out)
	}
	out, _, code = sandbox(t, home, "verify", "--trust-host", "last")
	if code != 0 || strings.Count(out, "OK ") != 9 {
		t.Fatalf("verify last: %d\n%s", code, out)
	}
	_, _, code = sandbox(t, home, "verify", "last")
	if code != 5 {
		t.Fatalf("verify without trust: exit %d, want 5", code)
	}
	first := strings.Fields(lines[3])[0]
	out, _, code = sandbox(t, home, "replay", first)
	if code != 0 || !strings.Contains(out, "matches") {
		t.Fatalf("replay: %d %s", code, out)
	}
	out, _, code = sandbox(t, home, "show", first)
	if code != 0 || !strings.Contains(out, "fs:"+work+":ro") || !strings.Contains(out, "decisions") {
		t.Fatalf("show: %d\n%s", code, out)
	}
	deadlineRun := strings.Fields(lines[1])[0]
	_, errOut, code = sandbox(t, home, "replay", deadlineRun)
	if code == 0 || !strings.Contains(errOut, "cannot be replayed") {
		t.Fatalf("replay of a deadline run: %d %q", code, errOut)
	}
	out, _, code = sandbox(t, home, "replay", "last")
	if code != 0 || !strings.Contains(out, "matches") {
		t.Fatalf("replay of an out-of-fuel run: %d %s", code, out)
	}
	out, _, code = sandbox(t, home, "doctor")
	if code != 0 || !strings.Contains(out, "S2 Sandbox      yes") || !strings.Contains(out, "S5 MicroVM      no") {
		t.Fatalf("doctor: %d\n%s", code, out)
	}
}

func TestRunRefusals(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run", "--grant", "kernel", "--", guestPath(t, "hello")}, 125, "tier S5 (MicroVM) is unavailable on this host"},
		{[]string{"run", "--tier", "S5", "--", guestPath(t, "hello")}, 125, "--escalate"},
		{[]string{"run", "--tier", "S1", "--", guestPath(t, "hello")}, 125, "below"},
		{[]string{"run", "--grant", "fs:x:rx", "--", guestPath(t, "hello")}, 125, `grant "fs:x:rx": field mode`},
		{[]string{"run", "--", "/etc/passwd"}, 126, "not an executable file"},
		{[]string{"run", "--env", "NOEQUALS", "--", guestPath(t, "hello")}, 125, "NAME=VALUE"},
		{[]string{"run", "--", "/nonexistent.wasm"}, 127, "no such file"},
		{[]string{"replay", "nope"}, 3, "run"},
	}
	for _, tc := range tests {
		_, errOut, code := sandbox(t, home, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d (want %d), %q (want %q)", tc.args, code, tc.code, errOut, tc.msg)
		}
	}
}

// TestNativeRealPrograms runs real programs at S1 as a user would, and
// checks that each run is sealed, verifies, and has its energy
// attributed through its own cgroup.
//
// Not parallel: it runs the programs from their directory, as a user
// would, and the working directory is the whole test process's (a
// parallel test that ran go beside it once found no go.mod).
func TestNativeRealPrograms(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("S1 as tested here runs as root (the CI machines' user)")
	}
	home, proj := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(proj, "script.py"), []byte("import sys\nprint('python', sys.version_info[0])\nopen('out.txt', 'w').write('written')\n"), 0o644)
	os.WriteFile(filepath.Join(proj, "hello.c"), []byte("#include <stdio.h>\nint main(void){puts(\"hello from cc\");return 0;}\n"), 0o644)
	if out, err := exec.Command("git", "-C", proj, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	t.Chdir(proj)
	g := "fs:" + proj + ":rw"
	tests := []struct {
		args []string
		out  string
		code int
	}{
		{[]string{"run", "-q", "--grant", g, "--", "python3", "script.py"}, "python 3\n", 0},
		{[]string{"run", "-q", "--grant", g, "--", "git", "status", "--short"}, "?? hello.c\n?? out.txt\n?? script.py\n", 0},
		{[]string{"run", "-q", "--grant", g, "--", "sh", "-c", "echo from sh; exit 4"}, "from sh\n", 4},
		{[]string{"run", "-q", "--grant", g, "--", "sh", "-c", "cc hello.c -o a.out && ./a.out"}, "hello from cc\n", 0},
	}
	for _, tc := range tests {
		out, errOut, code := sandbox(t, home, tc.args...)
		if code != tc.code || out != tc.out {
			t.Errorf("%v: exit %d (want %d), stdout %q (want %q), stderr %s", tc.args[4:], code, tc.code, out, tc.out, errOut)
			continue
		}
		vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
		if vcode != 0 || !strings.Contains(vout, "at S1 (required S1)") {
			t.Errorf("%v: verify: %d\n%s", tc.args[4:], vcode, vout)
		}
		show, _, _ := sandbox(t, home, "show", "last")
		if !strings.Contains(show, "run CPU") || !strings.Contains(show, "cgroup") {
			t.Errorf("%v: energy not attributed through the run's cgroup:\n%s", tc.args[4:], show)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(proj, "out.txt")); string(b) != "written" {
		t.Errorf("python's output file: %q", b)
	}
	if _, err := os.Stat(filepath.Join(proj, "a.out")); err != nil {
		t.Errorf("cc's output: %v", err)
	}
	// A command outside what the run can see is refused before it starts.
	_, errOut, code := sandbox(t, home, "run", "--", "/root/.pyenv/shims/python3")
	if code == 0 || !strings.Contains(errOut, "not visible inside") && !strings.Contains(errOut, "no such file") {
		t.Errorf("invisible command: %d %s", code, errOut)
	}
}

// TestForgedOutputRefused: a run's stdout.log changed after sealing does
// not verify, is not shown as the run's own, and replay says so.
func TestForgedOutputRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	out, errOut, code := sandbox(t, home, "run", "-q", "--", guestPath(t, "hello"), "sealed")
	if code != 0 || out != "hello, sealed\n" {
		t.Fatalf("run: %d %q %s", code, out, errOut)
	}
	runs, _ := os.ReadDir(filepath.Join(home, "runs"))
	rd := filepath.Join(home, "runs", runs[0].Name())
	for _, tc := range []struct {
		name  string
		bytes []byte
		code  string
	}{
		{"extended", []byte("hello, sealed\nand a forged line\n"), "extended"},
		{"changed", []byte("hello, forged\n"), "address"},
		{"cut short", []byte("hello"), "truncated"},
	} {
		os.WriteFile(filepath.Join(rd, "stdout.log"), tc.bytes, 0o644)
		vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last")
		if vcode != 4 || !strings.Contains(vout, "FAIL  output") || !strings.Contains(vout, tc.code) {
			t.Errorf("%s: verify %d\n%s", tc.name, vcode, vout)
		}
		show, _, _ := sandbox(t, home, "show", "last")
		if strings.Contains(show, "forged") || !strings.Contains(show, "stdout.log not shown") {
			t.Errorf("%s: show printed the forged output:\n%s", tc.name, show)
		}
		rout, rerr, _ := sandbox(t, home, "replay", "last")
		if !strings.Contains(rout+rerr, "stdout.log in the run directory is not what the run wrote") {
			t.Errorf("%s: replay: %s %s", tc.name, rout, rerr)
		}
	}
	os.Remove(filepath.Join(rd, "stdout.log"))
	if vout, _, vcode := sandbox(t, home, "verify", "--trust-host", "last"); vcode != 4 || !strings.Contains(vout, "missing") {
		t.Errorf("missing: verify %d\n%s", vcode, vout)
	}
}

// TestBudgetsAsTheReceiptStates: a joule budget is enforced against the
// figure the receipt states. At S1 a busy loop under cpu:1mJ is stopped
// (budget-exhausted, exit 124), the receipt at most a few sampling
// intervals over and saying so; at S2 the fuel the budget buys bounds
// the receipt's figure; a gpu:… grant alone puts Gpu on the unit, which
// is refused where no executor gives a GPU.
func TestBudgetsAsTheReceiptStates(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	shown := func() string { s, _, _ := sandbox(t, home, "show", "last"); return s }
	receiptCpu := func() (energy.Microjoules, string) {
		d, err := (&host.Host{Store: store.Of(&state.Dir{Root: home})}).Resolve("last")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(d, "receipt.cose"))
		r, err := receipt.Open(b, key.Trust{})
		if r == nil {
			t.Fatal(err)
		}
		c := r.Class(device.CPU)
		return c.Measured + c.Estimated, d
	}
	// S2: the guest spins; fuel stops it; the receipt's figure is the fuel's.
	_, _, code := sandbox(t, home, "run", "-q", "--grant", "cpu:1mJ", "--", guestPath(t, "spin"))
	if code != 124 {
		t.Fatalf("S2 spin under cpu:1mJ: exit %d", code)
	}
	if f, _ := receiptCpu(); f > energy.Millijoule {
		t.Errorf("S2: the receipt states %s for a 1 mJ budget", f)
	}
	if s := shown(); !strings.Contains(s, "compute use Cpu") || !strings.Contains(s, "ran out") {
		t.Errorf("S2: compute decisions not logged:\n%s", s)
	}
	if _, _, code := sandbox(t, home, "verify", "--trust-host", "last"); code != 0 {
		t.Errorf("S2 run does not verify")
	}
	if os.Geteuid() != 0 {
		t.Skip("the S1 budget is enforced through the run's cgroup, tested as root")
	}
	// S1: a busy loop, stopped at its budget.
	_, errOut, code := sandbox(t, home, "run", "-q", "--grant", "cpu:1mJ", "--", "sh", "-c", "while :; do :; done")
	if code != 124 {
		t.Fatalf("S1 busy loop under cpu:1mJ: exit %d %s", code, errOut)
	}
	f, dir := receiptCpu()
	b, _ := os.ReadFile(filepath.Join(dir, "attestation.json"))
	a, _ := attest.Verify(b, key.Trust{})
	if a.Claim.Outcome.Status != attest.BudgetExhausted || !strings.Contains(a.Claim.Outcome.Detail, "one interval more") {
		t.Errorf("S1 outcome %+v", a.Claim.Outcome)
	}
	// One interval at the estimator's rate (TDP per CPU) is the most it may
	// be over; allow for the time the kill takes.
	perCPU := energy.Microjoules(64 * energy.Joule) // a generous rate: 64 W per CPU
	if f < energy.Millijoule || f > energy.Millijoule+perCPU*energy.Microjoules(5*host.BudgetSample)/energy.Microjoules(time.Second) {
		t.Errorf("S1: the receipt states %s for a 1 mJ budget", f)
	}
	if _, _, code := sandbox(t, home, "verify", "--trust-host", "last"); code != 0 {
		t.Errorf("S1 run does not verify")
	}
	// gpu:5J alone: the unit asks for Cpu (the default) and Gpu, which
	// no executor here gives a run (no GPU on this machine): refused as
	// unavailable with S1's GPU probe's reason,
	// not an internal error and not a run sealed as if it had a GPU.
	out, errOut, code := sandbox(t, home, "run", "-q", "--grant", "gpu:5J", "--", "/bin/true")
	if code != 125 || !strings.Contains(errOut, "asks for Gpu") || !strings.Contains(errOut, "no /dev/nvidiactl: no NVIDIA driver on this host") {
		t.Fatalf("gpu:5J alone: exit %d %s %s", code, out, errOut)
	}
}

// TestLimitsAreSealed: the limits a run ran under are in its unit (so
// the attestation binds them), show prints them, and replay applies the
// recorded ones, not its own host's defaults.
func TestLimitsAreSealed(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	_, _, code := sandbox(t, home, "run", "--memory-pages", "64", "-q", "--deadline", "20s", "--", guestPath(t, "membomb"))
	if code != 137 {
		t.Fatalf("membomb under 64 pages: exit %d", code)
	}
	show, _, _ := sandbox(t, home, "show", "last")
	if !strings.Contains(show, "limits   deadline 20s, 64 WebAssembly pages (4 MiB)") {
		t.Fatalf("show:\n%s", show)
	}
	// This host's default is 4096 pages; the replay applies 64, and so
	// runs out of memory where the run did.
	out, errOut, code := sandbox(t, home, "replay", "last")
	if code != 0 || !strings.Contains(out+errOut, "matches") {
		t.Fatalf("replay: %d %s %s", code, out, errOut)
	}
	if os.Geteuid() == 0 {
		sandbox(t, home, "run", "--memory", "64MiB", "--pids", "32", "-q", "--", "/bin/true")
		show, _, _ := sandbox(t, home, "show", "last")
		if !strings.Contains(show, "memory 64 MiB, 32 processes") {
			t.Fatalf("show:\n%s", show)
		}
	}
}
