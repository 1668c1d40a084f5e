package wasm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guest"
	"github.com/opensubstrate/sandbox/internal/job"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/kv"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

var testExec *Executor

func TestMain(m *testing.M) {
	dir, _ := os.MkdirTemp("", "wasm-cache-")
	var err error
	testExec, err = New(Config{CacheDir: dir})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type run struct {
	res      *job.Result
	err      error
	stdout   string
	stderr   string
	journal  []byte
	root     addr.Addr
	enf      *grant.Enforcer
}

func goGuest(t testing.TB, name string) []byte {
	t.Helper()
	p, err := guest.Go(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// execute runs image with grants (command-line syntax) and args.
func execute(t testing.TB, image []byte, grants []string, store *kv.Store, deadline time.Duration, args ...string) run {
	t.Helper()
	g, err := grant.ParseArgs(append([]string{"cpu:50J"}, grants...), "/")
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
	res, err := testExec.Run(context.Background(), &job.Job{
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
