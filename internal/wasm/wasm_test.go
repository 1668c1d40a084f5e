package wasm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/kv"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

var testExec *Executor

func TestMain(m *testing.M) {
	dir, _ := os.MkdirTemp("", "wasm-cache-")
	var err error
	testExec, err = New(Config{CacheDir: dir, CacheKey: [32]byte{1}})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type run struct {
	res     *executor.Result
	err     error
	stdout  string
	stderr  string
	journal []byte
	root    addr.Addr
	enf     *grant.Enforcer
}

func goGuest(t testing.TB, name string) []byte {
	t.Helper()
	return guestbuild.Read(t, guestbuild.Go, name)
}

// execute runs image with grants (command-line syntax) and args.
func execute(t testing.TB, image []byte, grants []string, store *kv.Store, deadline time.Duration, args ...string) run {
	t.Helper()
	return executeWith(t, image, append([]string{"cpu:50J"}, grants...), store, deadline, args...)
}

func executeBudget(t testing.TB, image []byte, budget string, deadline time.Duration) run {
	t.Helper()
	return executeWith(t, image, []string{"cpu:" + budget}, nil, deadline)
}

func executeWith(t testing.TB, image []byte, grants []string, store *kv.Store, deadline time.Duration, args ...string) run {
	t.Helper()
	g, err := grant.ParseArgs(grants, "/")
	if err != nil {
		t.Fatal(err)
	}
	u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(image), Entry: "guest.wasm", Args: append([]string{"guest.wasm"}, args...)}
	_, ga, _ := g.Canonical()
	u.Grants = ga
	_, ua, err := u.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	var jb, out, errb bytes.Buffer
	rec := journal.NewWriter(&jb)
	enf := grant.NewEnforcer(g)
	res, err := testExec.Run(context.Background(), &executor.Job{
		Unit: u, UnitAddr: ua, Image: image, Grants: g, Enforcer: enf, Record: rec,
		KV: store, Stdout: &out, Stderr: &errb, Deadline: deadline,
	})
	return run{res: res, err: err, stdout: out.String(), stderr: errb.String(), journal: jb.Bytes(), root: rec.Root(), enf: enf}
}

func TestProbe(t *testing.T) {
	p := testExec.Probe(context.Background())
	if !p.Available {
		t.Fatalf("S2 probe: %s", p.Reason)
	}
}

func TestHello(t *testing.T) {
	r := execute(t, goGuest(t, "hello"), nil, nil, time.Minute, "tests")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stdout != "hello, tests\n" || r.stderr != "goodbye\n" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r.res.Outcome.Status != attest.Exited || *r.res.Outcome.ExitCode != 0 || *r.res.Fuel == 0 {
		t.Fatalf("outcome %+v fuel %d", r.res.Outcome, *r.res.Fuel)
	}
	// Deterministic: the same run uses the same fuel and makes the same journal.
	r2 := execute(t, goGuest(t, "hello"), nil, nil, time.Minute, "tests")
	if *r2.res.Fuel != *r.res.Fuel || r2.root != r.root {
		t.Fatalf("fuel %d then %d; root %s then %s", *r.res.Fuel, *r2.res.Fuel, r.root, r2.root)
	}
}

func TestFilesThroughGrants(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("granted content\n"), 0o644)
	os.Symlink("/etc", filepath.Join(dir, "escape"))
	cat := goGuest(t, "cat")

	r := execute(t, cat, []string{"fs:" + dir + ":ro"}, nil, time.Minute, filepath.Join(dir, "in.txt"))
	if r.stdout != "granted content\n" || *r.res.Outcome.ExitCode != 0 {
		t.Fatalf("granted read: %q %q %+v", r.stdout, r.stderr, r.res.Outcome)
	}
	r = execute(t, cat, []string{"fs:" + dir + ":ro"}, nil, time.Minute, "/etc/passwd")
	if !strings.Contains(strings.ToLower(r.stderr), "permission denied") || *r.res.Outcome.ExitCode != 1 {
		t.Fatalf("ungranted read: %q %+v", r.stderr, r.res.Outcome)
	}
	r = execute(t, cat, []string{"fs:" + dir + ":ro"}, nil, time.Minute, filepath.Join(dir, "escape", "passwd"))
	if !strings.Contains(strings.ToLower(r.stderr), "permission denied") || r.stdout != "" {
		t.Fatalf("symlink escape: %q %q", r.stdout, r.stderr)
	}
	r = execute(t, cat, []string{"fs:" + dir + ":ro"}, nil, time.Minute, "-w", filepath.Join(dir, "out.txt"), "x")
	if !strings.Contains(strings.ToLower(r.stderr), "permission denied") {
		t.Fatalf("write to ro grant: %q", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.txt")); err == nil {
		t.Fatal("a read-only grant was written")
	}
	r = execute(t, cat, []string{"fs:" + dir + ":rw"}, nil, time.Minute, "-w", filepath.Join(dir, "out.txt"), "written")
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "written" || r.stderr != "" {
		t.Fatalf("write to rw grant: %q %q", b, r.stderr)
	}
	r = execute(t, cat, []string{"fs:" + dir + ":rw:quota=4B"}, nil, time.Minute, "-w", filepath.Join(dir, "big.txt"), "more than four")
	if !strings.Contains(r.stderr, "not permitted") {
		t.Fatalf("quota: %q", r.stderr)
	}
	log := r.enf.Log()
	found := false
	for _, d := range log.Decisions {
		if !d.Allow && strings.Contains(d.Rule, "quota") {
			found = true
		}
	}
	if !found {
		t.Fatalf("quota refusal not logged: %+v", log.Decisions)
	}
}

func TestKV(t *testing.T) {
	store, _ := kv.Open(t.TempDir())
	img := goGuest(t, "kvuser")
	for want := 1; want <= 3; want++ {
		r := execute(t, img, []string{"kv:cache:rw"}, store, time.Minute)
		if strings.TrimSpace(r.stdout) != strconv.Itoa(want) {
			t.Fatalf("run %d: %q %q", want, r.stdout, r.stderr)
		}
	}
	r := execute(t, img, []string{"kv:cache:ro"}, store, time.Minute)
	if !strings.Contains(r.stderr, "errno 2") || *r.res.Outcome.ExitCode != 1 {
		t.Fatalf("read-only namespace: %q %q", r.stdout, r.stderr)
	}
	r = execute(t, img, nil, store, time.Minute, "other")
	if !strings.Contains(r.stderr, "get other/count: errno 2") {
		t.Fatalf("ungranted namespace: %q", r.stderr)
	}
}

func TestClockAndRandom(t *testing.T) {
	img := goGuest(t, "clockrand")
	a := execute(t, img, nil, nil, time.Minute)
	b := execute(t, img, nil, nil, time.Minute)
	if a.stdout != b.stdout || !strings.Contains(a.stdout, "time 2022-01-01") {
		t.Fatalf("ungranted clock and random are not deterministic:\n%s\n%s", a.stdout, b.stdout)
	}
	if n, _ := journal.NewWriter(nil).Len(); n != 0 || len(a.journal) != 0 {
		t.Fatalf("deterministic inputs were journaled: %d bytes", len(a.journal))
	}
	g := execute(t, img, []string{"clock", "random"}, nil, time.Minute)
	if g.stdout == a.stdout || !strings.Contains(g.stdout, "time "+time.Now().UTC().Format("2006-01-02")) {
		t.Fatalf("granted clock: %q", g.stdout)
	}
	entries, root, err := journal.Parse(g.journal)
	if err != nil || root != g.root {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range entries {
		kinds[e.Kind]++
	}
	if kinds["random"] == 0 || kinds["clock.wall"] == 0 {
		t.Fatalf("journal kinds %v", kinds)
	}
	// The decision log records the deterministic stand-ins as denials.
	denied := 0
	for _, d := range a.enf.Log().Decisions {
		if !d.Allow && (d.Kind == grant.KindClock || d.Kind == grant.KindRandom) {
			denied++
		}
	}
	if denied == 0 {
		t.Fatal("ungranted clock and random reads are not in the decision log")
	}
}

// TestSpinStoppedByDeadline: with fuel for hours, only the deadline can
// stop the guest, and it does.
func TestSpinStoppedByDeadline(t *testing.T) {
	r := executeBudget(t, goGuest(t, "spin"), "1000000J", 300*time.Millisecond)
	if r.err != nil || r.res.Outcome.Status != attest.Deadline {
		t.Fatalf("spin: %+v (%v)", r.res.Outcome, r.err)
	}
}

func TestSpinStoppedByFuel(t *testing.T) {
	r := executeBudget(t, goGuest(t, "spin"), "1J", time.Minute)
	if r.res.Outcome.Status != attest.OutOfFuel {
		t.Fatalf("spin: %+v (%v)", r.res.Outcome, r.err)
	}
	budget := DefaultModel.Fuel(1_000_000)
	if *r.res.Fuel < budget || *r.res.Fuel > budget+10_000 {
		t.Fatalf("fuel used %d of budget %d", *r.res.Fuel, budget)
	}
}

func TestMemoryBomb(t *testing.T) {
	small, err := New(Config{MemoryLimitPages: 1024}) // 64 MiB
	if err != nil {
		t.Fatal(err)
	}
	saved := testExec
	testExec = small
	defer func() { testExec = saved }()
	r := execute(t, goGuest(t, "membomb"), nil, nil, time.Minute)
	if r.res.Outcome.Status != attest.OutOfMem {
		t.Fatalf("membomb: %+v stderr %q", r.res.Outcome, lastLine(r.stderr))
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func TestProberIsContained(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("x"), 0o644)
	r := execute(t, goGuest(t, "prober"), []string{"fs:" + dir + ":ro"}, nil, time.Minute, filepath.Join(dir, "ok.txt"))
	if r.err != nil || r.res.Outcome.Status != attest.Exited {
		t.Fatalf("prober: %v %+v %s", r.err, r.res.Outcome, r.stderr)
	}
	out := strings.ToLower(r.stdout)
	for _, want := range []string{
		"read /etc/passwd: open /etc/passwd: permission denied",
		"read /etc/shadow: open /etc/shadow: permission denied",
		"write /tmp/prober: open /tmp/prober: permission denied",
		"read " + strings.ToLower(dir) + "/ok.txt: ok",
		"ok.txt.new: permission denied",
		"kv get secrets: errno 2",
		"kv put secrets: errno 2",
		`env home="" path=""`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("prober output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(out, "connect 127.0.0.1:22: ") || strings.Contains(out, "connect 127.0.0.1:22: ok") {
		t.Errorf("socket: %s", r.stdout)
	}
	// "/" lists only the way to the grant.
	first := strings.Split(strings.TrimPrefix(dir, "/"), "/")[0]
	if !strings.Contains(r.stdout, "list /: ["+first+"]") {
		t.Errorf("root listing: %s", r.stdout)
	}
	denials := 0
	for _, d := range r.enf.Log().Decisions {
		if !d.Allow {
			denials++
		}
	}
	if denials < 5 {
		t.Errorf("only %d denials logged: %+v", denials, r.enf.Log().Decisions)
	}
}

// replay re-executes image from a recorded journal.
func replay(t *testing.T, image []byte, grants []string, journalBytes []byte, args ...string) run {
	t.Helper()
	g, _ := grant.ParseArgs(append([]string{"cpu:50J"}, grants...), "/")
	u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(image), Entry: "guest.wasm", Args: append([]string{"guest.wasm"}, args...)}
	_, ga, _ := g.Canonical()
	u.Grants = ga
	_, ua, _ := u.Canonical()
	entries, _, err := journal.Parse(journalBytes)
	if err != nil {
		t.Fatal(err)
	}
	rd := journal.NewReader(entries)
	var out, errb bytes.Buffer
	enf := grant.NewEnforcer(g)
	res, err := testExec.Run(context.Background(), &executor.Job{
		Unit: u, UnitAddr: ua, Image: image, Grants: g, Enforcer: enf, Replay: rd,
		Stdout: &out, Stderr: &errb, Deadline: time.Minute,
	})
	if err == nil && rd.Remaining() != 0 {
		t.Fatalf("replay left %d journal entries unread", rd.Remaining())
	}
	return run{res: res, err: err, stdout: out.String(), stderr: errb.String(), root: rd.Root(), enf: enf}
}

func TestReplayServesTheJournal(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("original\n"), 0o644)
	img := goGuest(t, "cat")
	grants := []string{"fs:" + dir + ":rw", "clock", "random"}
	rec := execute(t, img, grants, nil, time.Minute, in)
	if rec.stdout != "original\n" {
		t.Fatalf("recorded run: %q %q", rec.stdout, rec.stderr)
	}
	// The host changes; the replay still sees what the original saw.
	os.WriteFile(in, []byte("changed!!\n"), 0o644)
	rep := replay(t, img, grants, rec.journal, in)
	if rep.err != nil || rep.stdout != rec.stdout || rep.root != rec.root || *rep.res.Fuel != *rec.res.Fuel {
		t.Fatalf("replay: err %v stdout %q root %v fuel %d/%d", rep.err, rep.stdout, rep.root == rec.root, *rep.res.Fuel, *rec.res.Fuel)
	}
	a, _, _ := rec.enf.Log().Canonical()
	b, _, _ := rep.enf.Log().Canonical()
	if !bytes.Equal(a, b) {
		t.Fatal("replay made a different decision log")
	}
	// A replay that asks for something else diverges and says where.
	other := replay(t, img, grants, rec.journal, filepath.Join(dir, "other.txt"))
	if other.err == nil || !strings.Contains(other.err.Error(), "diverged") {
		t.Fatalf("divergent replay: %v", other.err)
	}
}

// TestCGuests runs the C guests, built with clang and wasi-libc.
func TestCGuests(t *testing.T) {
	r := execute(t, cGuest(t, "hello"), nil, nil, time.Minute, "clang")
	if r.err != nil || r.stdout != "hello, clang\n" || r.stderr != "goodbye\n" {
		t.Fatalf("c hello: %v %q %q", r.err, r.stdout, r.stderr)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("from C\n"), 0o644)
	r = execute(t, cGuest(t, "cat"), []string{"fs:" + dir + ":ro"}, nil, time.Minute, filepath.Join(dir, "f"), "/etc/passwd")
	if r.stdout != "from C\n" || !strings.Contains(strings.ToLower(r.stderr), "/etc/passwd: permission denied") || *r.res.Outcome.ExitCode != 1 {
		t.Fatalf("c cat: %q %q %+v", r.stdout, r.stderr, r.res.Outcome)
	}
	r = execute(t, cGuest(t, "cpu"), nil, nil, time.Minute, "1000")
	r2 := execute(t, cGuest(t, "cpu"), nil, nil, time.Minute, "2000")
	if r.stdout == "" || *r2.res.Fuel <= *r.res.Fuel {
		t.Fatalf("c cpu: %q, fuel %d then %d", r.stdout, *r.res.Fuel, *r2.res.Fuel)
	}
}
