package wasm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// parkJob is a ticker run's job in dir, as a unit that names dir.
func parkJob(t *testing.T, img []byte, dir string, extra []string, lines string) (*executor.Job, *grant.Enforcer) {
	t.Helper()
	g, err := grant.ParseArgs(append([]string{"cpu:50J", "fs:" + dir + ":rw"}, extra...), "/")
	if err != nil {
		t.Fatal(err)
	}
	u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(img), Entry: "ticker.wasm", Args: []string{"ticker.wasm", lines, filepath.Join(dir, "ticks.txt")}}
	_, u.Grants, _ = g.Canonical()
	_, ua, err := u.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	enf := grant.NewEnforcer(g)
	return &executor.Job{Unit: u, UnitAddr: ua, Image: img, Grants: g, Enforcer: enf, Deadline: time.Minute}, enf
}

// parkAfter is a stdout that asks the run to park once it has seen n
// lines.
type parkAfter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	n     int
	park  func()
	asked bool
}

func (p *parkAfter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	if !p.asked && p.park != nil && bytes.Count(p.buf.Bytes(), []byte("\n")) >= p.n {
		p.asked = true
		p.park()
	}
	return len(b), nil
}

// parkTicker runs ticker LINES in dir and parks it after n lines (0: as
// it starts); it returns the park, its journal and what it printed.
func parkTicker(t *testing.T, img []byte, dir string, extra []string, lines string, n int) (*executor.Parked, []byte, string) {
	t.Helper()
	var jb bytes.Buffer
	out := &parkAfter{n: n}
	j, _ := parkJob(t, img, dir, extra, lines)
	j.Record, j.Stdout = journal.NewWriter(&jb), out
	j.OnStart = func(c executor.Control) {
		out.park = c.Park
		if n == 0 {
			c.Park()
		}
	}
	res, err := testExec.Run(context.Background(), j)
	if err != nil || res.Parked == nil || (n == 0) != (res.Parked.Boundary == 0) {
		t.Fatalf("park after %d lines: %v %+v", n, err, res)
	}
	return res.Parked, jb.Bytes(), out.buf.String()
}

// liveSplit is a continuation's stdout: everything, and what came once
// it was live.
type liveSplit struct {
	all, after bytes.Buffer
	live       bool
}

func (l *liveSplit) Write(b []byte) (int, error) {
	l.all.Write(b)
	if l.live {
		l.after.Write(b)
	}
	return len(b), nil
}

// continueRun continues a parked ticker run from its journal, with its
// workspace now at moved.
func continueRun(t *testing.T, img []byte, dir, moved string, extra []string, lines string, parked *executor.Parked, parkedJournal []byte) (*executor.Result, error, *liveSplit, []byte, *grant.Enforcer) {
	t.Helper()
	entries, _, err := journal.Parse(parkedJournal)
	if err != nil {
		t.Fatal(err)
	}
	var jb bytes.Buffer
	rec := journal.NewWriter(&jb)
	for _, e := range entries {
		if err := rec.AppendEntry(e); err != nil {
			t.Fatal(err)
		}
	}
	out := &liveSplit{}
	j, enf := parkJob(t, img, dir, extra, lines)
	j.Record, j.Replay, j.Continue = rec, journal.NewReader(entries), parked
	j.Live = func() { out.live = true }
	j.Remap = map[string]string{dir: moved}
	j.Stdout = out
	res, err := testExec.Run(context.Background(), j)
	return res, err, out, jb.Bytes(), enf
}

// A run parked at a host-call boundary and continued elsewhere (its
// workspace restored at another path) ends as the unparked run does:
// the same output, byte for byte, the same requests to the host, the same
// file, the same fuel, the same decisions. Its open file keeps its position, its
// open directory its place in the listing.
func TestParkAndContinueIsTheUnparkedRun(t *testing.T) {
	img := goGuest(t, "ticker")
	const lines = "400"
	dir := t.TempDir()

	// The unparked run.
	var jb0, out0 bytes.Buffer
	j, enf0 := parkJob(t, img, dir, nil, lines)
	j.Record, j.Stdout = journal.NewWriter(&jb0), &out0
	res0, err := testExec.Run(context.Background(), j)
	if err != nil || res0.Parked != nil || *res0.Outcome.ExitCode != 0 {
		t.Fatalf("unparked run: %v %+v", err, res0)
	}
	file0, _ := os.ReadFile(filepath.Join(dir, "ticks.txt"))
	os.Remove(filepath.Join(dir, "ticks.txt"))

	for _, at := range []int{0, 1, 150, 333} { // 0: asked before it started
		// The same run, parked after `at` lines.
		p, jb1, parkedOut := parkTicker(t, img, dir, nil, lines, at)
		if len(p.Memory) == 0 || p.MemoryAddr != addr.Of(p.Memory) || (at > 0 && len(p.Handles) != 2) || p.Fuel == 0 {
			t.Fatalf("park after %d lines: %d bytes of memory, handles %+v, fuel %d", at, len(p.Memory), p.Handles, p.Fuel)
		}
		// Its workspace moves (a restore on another host).
		moved := t.TempDir()
		if err := exec.Command("cp", "-a", dir+"/.", moved).Run(); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, "ticks.txt"))

		res2, err, out2, jb2, enf2 := continueRun(t, img, dir, moved, nil, lines, p, jb1)
		if err != nil || res2.Parked != nil {
			t.Fatalf("continue after %d lines: %v", at, err)
		}
		if *res2.Outcome.ExitCode != 0 || out2.all.String() != out0.String() || parkedOut+out2.after.String() != out0.String() {
			t.Fatalf("continue after %d lines: outcome %+v\nstdout %q\nparked part %q\nlive part %q\nwant %q", at, res2.Outcome, out2.all.String(), parkedOut, out2.after.String(), out0.String())
		}
		// The journal is the parked run's, then the same requests the
		// unparked run made (the answers are this host's: a file's
		// times and inode are its own).
		e0, _, _ := journal.Parse(jb0.Bytes())
		e2, _, err := journal.Parse(jb2)
		if err != nil || !bytes.HasPrefix(jb2, jb1) || len(e2) != len(e0) {
			t.Fatalf("continue after %d lines: journal %v, %d entries, unparked %d", at, err, len(e2), len(e0))
		}
		for i := range e0 {
			if e0[i].Kind != e2[i].Kind || !bytes.Equal(e0[i].Req, e2[i].Req) {
				t.Fatalf("continue after %d lines: entry %d is %s %x; unparked, %s %x", at, i, e2[i].Kind, e2[i].Req, e0[i].Kind, e0[i].Req)
			}
		}
		if *res2.Fuel != *res0.Fuel {
			t.Fatalf("continue after %d lines: fuel %d, unparked %d", at, *res2.Fuel, *res0.Fuel)
		}
		if got, _ := os.ReadFile(filepath.Join(moved, "ticks.txt")); !bytes.Equal(got, file0) {
			t.Fatalf("continue after %d lines: the file differs (%d bytes, want %d)", at, len(got), len(file0))
		}
		if _, err := os.Stat(filepath.Join(dir, "ticks.txt")); err == nil {
			t.Fatal("the continuation wrote at the unit's path, not where the workspace is now")
		}
		a, _, _ := enf0.Log().Canonical()
		b, _, _ := enf2.Log().Canonical()
		if !bytes.Equal(a, b) {
			t.Fatalf("continue after %d lines: a different decision log", at)
		}
	}
}

// With real clock and randomness a continuation cannot equal another
// run; it equals itself replayed: its parked part is the parked run's
// output, its journal replays whole, and its clock never goes back.
func TestContinueWithRealInputsReplays(t *testing.T) {
	img := goGuest(t, "ticker")
	dir := t.TempDir()
	extra := []string{"clock", "random"}
	p, jb1, parkedOut := parkTicker(t, img, dir, extra, "300", 100)
	time.Sleep(20 * time.Millisecond) // parked for a while
	res2, err, out2, jb2, _ := continueRun(t, img, dir, dir, extra, "300", p, jb1)
	if err != nil || *res2.Outcome.ExitCode != 0 {
		t.Fatalf("continue: %v %+v", err, res2)
	}
	if !strings.HasPrefix(out2.all.String(), parkedOut) || parkedOut+out2.after.String() != out2.all.String() {
		t.Fatal("the continuation's parked part is not the parked run's output")
	}
	// Monotonic readings never go back across the park.
	var last int64 = -1
	entries, _, _ := journal.Parse(jb2)
	for i, e := range entries {
		if e.Kind != "clock.mono" {
			continue
		}
		var ns int64
		if err := cbor.Unmarshal(e.Resp, &ns); err != nil {
			t.Fatal(err)
		}
		if ns < last {
			t.Fatalf("entry %d: the monotonic clock went back from %d to %d", i, last, ns)
		}
		last = ns
	}
	// The whole journal replays to the same output.
	g, _ := grant.ParseArgs(append([]string{"cpu:50J", "fs:" + dir + ":rw"}, extra...), "/")
	rj, _ := parkJob(t, img, dir, extra, "300")
	var out3 bytes.Buffer
	rj.Replay, rj.Stdout, rj.Grants, rj.Enforcer = journal.NewReader(entries), &out3, g, grant.NewEnforcer(g)
	if _, err := testExec.Run(context.Background(), rj); err != nil || out3.String() != out2.all.String() {
		t.Fatalf("replay of the continued run: %v, same output %v", err, out3.String() == out2.all.String())
	}
}

// A continuation whose journal or park does not lead to the parked state
// is refused, naming the divergence; it never goes live.
func TestContinueDivergence(t *testing.T) {
	img := goGuest(t, "ticker")
	dir := t.TempDir()
	parked, jb1, _ := parkTicker(t, img, dir, nil, "200", 50)
	cases := map[string]func(p *executor.Parked){
		"other memory":       func(p *executor.Parked) { p.MemoryAddr = addr.Of([]byte("other")) },
		"a later park point": func(p *executor.Parked) { p.Boundary += 3 },
		"an earlier point":   func(p *executor.Parked) { p.Boundary -= 3 },
		"a file it never held": func(p *executor.Parked) {
			p.Handles = append(p.Handles, executor.Handle{H: 99, Path: filepath.Join(dir, "x")})
		},
		"after the run's end": func(p *executor.Parked) { p.Boundary += 1 << 40 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			p := *parked
			p.Handles = append([]executor.Handle(nil), p.Handles...)
			mutate(&p)
			res, err, out, _, _ := continueRun(t, img, dir, dir, nil, "200", &p, jb1)
			var d *ParkDivergence
			var jd *journal.Divergence
			if !errors.As(err, &d) && !errors.As(err, &jd) {
				t.Fatalf("continued: %v %+v", err, res)
			}
			if out.live {
				t.Fatalf("it went live: %v", err)
			}
		})
	}
}

// BenchmarkParkContinue: the ticker (2,000 lines) run whole, beside the
// same run parked half way (the park's cost: the run to there and the
// memory image) and its continuation (the replay to the park point and
// the rest).
func BenchmarkParkContinue(b *testing.B) {
	img := guestbuild.Read(b, guestbuild.Go, "ticker")
	dir := b.TempDir()
	run := func(park int) (*executor.Parked, []byte) {
		var jb bytes.Buffer
		out := &parkAfter{n: park}
		g, _ := grant.ParseArgs([]string{"cpu:50J", "fs:" + dir + ":rw"}, "/")
		u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(img), Entry: "ticker.wasm", Args: []string{"ticker.wasm", "2000", filepath.Join(dir, "ticks.txt")}}
		_, u.Grants, _ = g.Canonical()
		_, ua, _ := u.Canonical()
		j := &executor.Job{Unit: u, UnitAddr: ua, Image: img, Grants: g, Enforcer: grant.NewEnforcer(g), Deadline: time.Minute, Record: journal.NewWriter(&jb), Stdout: out}
		if park > 0 {
			j.OnStart = func(c executor.Control) { out.park = c.Park }
		}
		res, err := testExec.Run(context.Background(), j)
		if err != nil {
			b.Fatal(err)
		}
		return res.Parked, jb.Bytes()
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			if p, _ := run(0); p != nil {
				b.Fatal("parked")
			}
		}
	})
	b.Run("park-half-way", func(b *testing.B) {
		for b.Loop() {
			if p, _ := run(1000); p == nil {
				b.Fatal("not parked")
			}
		}
	})
	b.Run("continue-from-half-way", func(b *testing.B) {
		p, jb := run(1000)
		entries, _, _ := journal.Parse(jb)
		b.ResetTimer()
		for b.Loop() {
			g, _ := grant.ParseArgs([]string{"cpu:50J", "fs:" + dir + ":rw"}, "/")
			u := unit.Unit{Kind: tier.Wasm, Image: addr.Of(img), Entry: "ticker.wasm", Args: []string{"ticker.wasm", "2000", filepath.Join(dir, "ticks.txt")}}
			_, u.Grants, _ = g.Canonical()
			_, ua, _ := u.Canonical()
			var jb2 bytes.Buffer
			rec := journal.NewWriter(&jb2)
			for _, e := range entries {
				rec.AppendEntry(e)
			}
			j := &executor.Job{Unit: u, UnitAddr: ua, Image: img, Grants: g, Enforcer: grant.NewEnforcer(g), Deadline: time.Minute,
				Record: rec, Replay: journal.NewReader(entries), Continue: p, Stdout: io.Discard}
			if _, err := testExec.Run(context.Background(), j); err != nil {
				b.Fatal(err)
			}
		}
	})
}
