package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// suspendAfter is an exec's stdout that suspends its sandbox, from
// another goroutine, once it has seen n lines.
type suspendAfter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	n       int
	suspend func()
	once    sync.Once
}

func (s *suspendAfter) Write(b []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(b)
	hit := bytes.Count(s.buf.Bytes(), []byte("\n")) >= s.n
	s.mu.Unlock()
	if hit {
		s.once.Do(func() { go s.suspend() })
	}
	return len(b), nil
}

func (s *suspendAfter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// An S2 sandbox suspended while an exec runs parks the exec at a host
// call; exported, imported and resumed on another host, the exec goes on
// where it stopped and is sealed there as one run: all its output, a
// journal that replays to it, an attestation that cites the head it began
// at, in a record that verifies with both keys trusted.
func TestS2ExecParksAcrossHosts(t *testing.T) {
	t.Parallel()
	a, b := newS1Host(t), newS1Host(t)
	ctx := context.Background()
	info, err := a.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t, "clock", "random")})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := guestbuild.Go("ticker")
	if err != nil {
		t.Fatal(err)
	}
	var snap record.Snapshot
	var serr error
	done := make(chan struct{})
	out := &suspendAfter{n: 200, suspend: func() {
		snap, serr = a.Suspend(ctx, info.ID, "")
		close(done)
	}}
	file := filepath.Join(info.Workspace, "ticks.txt")
	_, err = a.Exec(ctx, info.ID, "", ExecRequest{Args: []string{mod, "3000", file}, Stdout: out, Deadline: time.Minute})
	var pe *ExecParkedError
	if !errors.As(err, &pe) || pe.N != 1 || pe.Boundary == 0 {
		t.Fatalf("the exec in flight: %v", err)
	}
	<-done
	if serr != nil || snap.Memory == nil {
		t.Fatalf("suspend: %+v %v", snap, serr)
	}
	parkedPart := out.String()
	if strings.Contains(parkedPart, "file ") || !strings.HasPrefix(parkedPart, "0 ") {
		t.Fatalf("the parked part: %q", parkedPart)
	}
	park, err := a.loadPark(*snap.Memory)
	if err != nil || len(park.Execs) != 1 || len(park.Execs[0].Handles) != 2 {
		t.Fatalf("the park: %+v %v", park, err)
	}

	var bundle bytes.Buffer
	if err := a.Export(info.ID, &bundle); err != nil {
		t.Fatal(err)
	}
	// The park's objects are named by the record too (its memory image
	// names them): a bundle without one is refused, naming it.
	for _, x := range []addr.Addr{*snap.Memory, park.Execs[0].Journal, park.Execs[0].Memory} {
		if _, err := b.Import(ctx, bytes.NewReader(without(t, bundle.Bytes(), "blobs/"+x.Hex())), host.LocalOwner, key.NewTrust(a.Key.Public())); !errors.Is(err, reject.Missing) || !strings.Contains(err.Error(), x.String()) {
			t.Errorf("a bundle without %s: %v", x, err)
		}
	}
	if _, err := b.Import(ctx, bytes.NewReader(bundle.Bytes()), host.LocalOwner, key.NewTrust(a.Key.Public())); err != nil {
		t.Fatal(err)
	}
	res, err := b.Resume(ctx, info.ID, host.LocalOwner)
	if err != nil || len(res.Continued) != 1 {
		t.Fatalf("resume on B: %+v %v", res, err)
	}
	c := res.Continued[0]
	if c.Err != nil || c.Run == nil || c.N != 1 {
		t.Fatalf("continued: %+v", c)
	}
	if res.Workspace == info.Workspace {
		t.Fatal("B restored the workspace at A's path: the remap is not tested")
	}
	r := c.Run
	if r.Attestation.Claim.Signer != b.Key.Public() || r.Result.Outcome.ExitCode == nil || *r.Result.Outcome.ExitCode != 0 {
		t.Fatalf("the continued run: %+v", r.Attestation.Claim)
	}
	all, _ := os.ReadFile(filepath.Join(r.Dir, host.FileStdout))
	if string(all) != parkedPart+string(c.Stdout) || !strings.Contains(string(c.Stdout), "file ") {
		t.Fatalf("the run's output is not the parked part and the continued part:\nall %d bytes\nparked %d\ncontinued %d", len(all), len(parkedPart), len(c.Stdout))
	}
	// The file the exec held open, written after the park at its
	// position, is whole on B.
	ticks, err := os.ReadFile(filepath.Join(res.Workspace, "ticks.txt"))
	if err != nil || bytes.Count(ticks, []byte("\n")) != 3000 || !bytes.HasPrefix(all, ticks[:100]) {
		t.Fatalf("ticks.txt on B: %d lines, %v", bytes.Count(ticks, []byte("\n")), err)
	}
	// It replays, from its journal, to the same output.
	rep, err := b.Replay(ctx, r.Dir, nil, nil)
	if err != nil || !rep.Matches() {
		t.Fatalf("replay of the continued run: %v %+v", err, rep)
	}
	if err := b.Remove(info.ID, host.LocalOwner); err != nil {
		t.Fatal(err)
	}
	rec, _ := os.ReadFile(b.RecordPath(info.ID))
	// Its attestation cites the head the exec began at, on A: the
	// record's genesis.
	st, err := record.VerifyBytes(rec)
	if cite := r.Attestation.Claim.Record; err != nil || cite == nil || cite.Genesis != record.Genesis(st.Header.Unit, st.Header.Grants) || cite.Head != cite.Genesis {
		t.Fatalf("cite: %+v %v", r.Attestation.Claim.Record, err)
	}
	runDir := func(x addr.Addr) string { return b.Store.Path("runs", x.Hex()) }
	vs, _, err := (&verify.Verifier{Trust: key.NewTrust(a.Key.Public(), b.Key.Public())}).Record(rec, runDir)
	if err != nil || vs.Phase != record.Ended || vs.Executed != 1 {
		t.Fatalf("the record: %+v %v", vs, err)
	}
}

// An exec that makes no host call cannot be parked: after ParkWait it is
// interrupted and sealed, and the suspension goes through without it.
func TestS2SuspendInterruptsWhatDoesNotPark(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	h.ParkWait = 300 * time.Millisecond
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := guestbuild.Go("spin")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   *host.Run
		err error
	}
	got := make(chan result, 1)
	go func() {
		r, err := h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{mod}, Deadline: time.Minute})
		got <- result{r, err}
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if i, err := h.Sandbox(info.ID, ""); err == nil && i.Running == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec never started")
		}
	}
	time.Sleep(100 * time.Millisecond) // in its loop
	snap, err := h.Suspend(ctx, info.ID, "")
	if err != nil || snap.Memory != nil {
		t.Fatalf("suspend: %+v %v", snap, err)
	}
	x := <-got
	if x.err != nil || x.r.Result.Outcome.Status != "killed" {
		t.Fatalf("the exec that did not park: %v %+v", x.err, x.r)
	}
	rec, _ := os.ReadFile(h.RecordPath(info.ID))
	st, err := record.VerifyBytes(rec)
	if err != nil || st.Phase != record.Parked || st.Executed != 1 {
		t.Fatalf("record: %+v %v", st, err)
	}
}

// A park names the grants its exec ran under; a continuation runs under
// them only if they are the sandbox's (its workspace where the park
// says it was): a park from a bundle cannot widen them.
func TestParkCannotBringGrants(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	now, then := t.TempDir(), "/tmp/sandbox-ws-then"
	sb := &Sandbox{ID: "sb-000000000001", Grants: grants(t, "fs:"+now+":rw"), Workspace: now}
	put := func(b []byte) addr.Addr {
		a := addr.Of(b)
		if err := h.Store.PutBlob(a, b); err != nil {
			t.Fatal(err)
		}
		return a
	}
	ub, ua, err := (&unit.Unit{Kind: tier.Wasm, Image: put([]byte("\x00asm\x01\x00\x00\x00")), Entry: "m.wasm", Args: []string{"m.wasm"}, Grants: addr.Of([]byte("grants"))}).Canonical()
	if err != nil {
		t.Fatal(err)
	}
	put(ub)
	x := ParkedExec{N: 1, Unit: ua, Workspace: then, Journal: put(nil), Memory: put([]byte("memory")), NextHandle: 1}
	for name, c := range map[string]struct {
		g  grant.Set
		ok bool
	}{
		"the sandbox's, its workspace then": {grants(t, "fs:"+then+":rw"), true},
		"the sandbox's, its workspace now":  {grants(t, "fs:"+now+":rw"), false},
		"more than the sandbox's":           {grants(t, "fs:"+then+":rw", "fs:/etc:rw"), false},
		"another budget":                    {func() grant.Set { g, _ := grant.ParseArgs([]string{"cpu:9000J", "fs:" + then + ":rw"}, "/"); return g }(), false},
	} {
		gb, ga, err := c.g.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		put(gb)
		x.Grants = ga
		_, _, err = h.continued(sb, x)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, reject.Splice)) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A sandbox that names no Cpu grant: its execs ran with the default.
	bare, _ := grant.ParseArgs([]string{"fs:" + now + ":rw"}, "/")
	sb.Grants = bare
	withDefault, _ := grant.ParseArgs([]string{"fs:" + then + ":rw", host.DefaultCPU}, "/")
	gb, ga, _ := withDefault.Canonical()
	put(gb)
	x.Grants = ga
	if _, _, err := h.continued(sb, x); err != nil {
		t.Errorf("the sandbox's grants with the default Cpu grant: %v", err)
	}
}

// Two execs in flight park together, in one park, and resume continues
// both; each is sealed as the whole run it is.
func TestS2TwoExecsParkTogether(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := guestbuild.Go("ticker")
	if err != nil {
		t.Fatal(err)
	}
	var started sync.WaitGroup
	started.Add(2)
	outs := make([]*suspendAfter, 2)
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i := range 2 {
		outs[i] = &suspendAfter{n: 50, suspend: started.Done}
		done.Add(1)
		go func() {
			defer done.Done()
			_, errs[i] = h.Exec(ctx, info.ID, "", ExecRequest{Args: []string{mod, "20000", filepath.Join(info.Workspace, fmt.Sprint("ticks", i))}, Stdout: outs[i], Deadline: time.Minute})
		}()
	}
	started.Wait() // both are running
	snap, err := h.Suspend(ctx, info.ID, "")
	if err != nil || snap.Memory == nil {
		t.Fatalf("suspend: %+v %v", snap, err)
	}
	done.Wait()
	for i, err := range errs {
		var pe *ExecParkedError
		if !errors.As(err, &pe) {
			t.Fatalf("exec %d: %v", i, err)
		}
	}
	if park, err := h.loadPark(*snap.Memory); err != nil || len(park.Execs) != 2 || park.Execs[0].N == park.Execs[1].N {
		t.Fatalf("the park: %+v %v", park, err)
	}
	res, err := h.Resume(ctx, info.ID, "")
	if err != nil || len(res.Continued) != 2 {
		t.Fatalf("resume: %+v %v", res, err)
	}
	for _, c := range res.Continued {
		if c.Err != nil || c.Run == nil || *c.Run.Result.Outcome.ExitCode != 0 {
			t.Fatalf("exec #%d: %+v", c.N, c)
		}
		all, _ := os.ReadFile(filepath.Join(c.Run.Dir, host.FileStdout))
		if !strings.HasSuffix(string(all), string(c.Stdout)) || !strings.Contains(string(c.Stdout), "file ") {
			t.Fatalf("exec #%d: its run's output does not end with what was continued", c.N)
		}
	}
	if i, _ := h.Sandbox(info.ID, ""); i.Execs != 2 {
		t.Fatalf("%d execs sealed", i.Execs)
	}
}
