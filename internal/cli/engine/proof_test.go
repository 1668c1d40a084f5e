package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/proof"
	"github.com/opensubstrate/sandbox/tier"
)

// TestMain lets this test binary be S1's init (the native executor
// starts this executable as each run's helper).
func TestMain(m *testing.M) {
	if code, ok := native.Helper(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const proofPack = "../../../conformance/v1"

func sandboxEngine(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errOut, New())
	return code, out.String(), errOut.String()
}

// TestProofRunVerify: a whole proof run on this machine makes a cell
// that proof verify accepts, its runs re-verified; every tier is in it,
// S0 and S2 green (they need nothing of the machine), none red; and
// proof verify refuses the cell with a flipped signature byte, a run
// whose attestation is not its subject, a missing tier and a duplicated
// one. Set SANDBOX_PROOF_SKIP_TCG=1 to skip S5 where it would run under
// TCG.
func TestProofRunVerify(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the tiers run on Linux")
	}
	home, dir := t.TempDir(), t.TempDir()
	cell, runs := filepath.Join(dir, "cell.json"), filepath.Join(dir, "runs")
	t0 := time.Now()
	code, out, errOut := sandboxEngine(t, "--home", home, "proof", "run", "--pack", proofPack, "--out", cell, "--runs", runs, "--json")
	t.Logf("proof run took %v:\n%s", time.Since(t0), errOut)
	if code != 0 {
		t.Fatalf("proof run: exit %d\n%s\n%s", code, out, errOut)
	}
	var j ProofJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(j.Predicate.Tiers) != len(tier.All) || j.Predicate.Pack.Failed != 0 || j.Predicate.Pack.Vectors == 0 {
		t.Fatalf("predicate %+v", j.Predicate)
	}
	for _, r := range j.Predicate.Tiers {
		if r.State == proof.Red || (r.Tier == tier.S0 || r.Tier == tier.S2) && r.State != proof.Green {
			t.Errorf("%s: %+v", r.Tier, r)
		}
		if !strings.Contains(errOut, "proof: "+r.Tier.String()+" ") {
			t.Errorf("no progress line for %s", r.Tier)
		}
	}
	code, out, errOut = sandboxEngine(t, "--home", home, "proof", "verify", cell, "--trust-host", "--runs", runs)
	if code != 0 || strings.Count(out, "OK    run") == 0 || strings.Contains(out, "not in --runs") {
		t.Fatalf("proof verify: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := sandboxEngine(t, "--home", home, "proof", "verify", cell); code != 5 {
		t.Errorf("with no trusted key: exit %d, want 5", code)
	}

	good, err := os.ReadFile(cell)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var env proof.Envelope
	if err := json.Unmarshal(good, &env); err != nil {
		t.Fatal(err)
	}
	flipped := env
	sig, _ := base64.StdEncoding.DecodeString(env.Signatures[0].Sig)
	sig[0] ^= 0x80
	flipped.Signatures = []proof.Signature{{KeyID: env.Signatures[0].KeyID, Sig: base64.StdEncoding.EncodeToString(sig)}}
	fb, _ := json.Marshal(flipped)

	// Cells the host's key signs, wrong: a forger with the key, or a bug.
	d, err := state.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	k, err := d.HostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o, err := proof.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	resigned := func(edit func(*proof.Statement)) []byte {
		st := o.Statement
		st.Predicate.Tiers = append([]proof.TierResult(nil), st.Predicate.Tiers...)
		edit(&st)
		body, err := jcs.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(proof.Sign(k, proof.PayloadType, body))
		return b
	}
	missing := resigned(func(st *proof.Statement) { st.Predicate.Tiers = st.Predicate.Tiers[:7] })
	dup := resigned(func(st *proof.Statement) { st.Predicate.Tiers[3] = st.Predicate.Tiers[4] })

	// A run directory whose attestation is another run's.
	tampered := filepath.Join(dir, "tampered")
	if err := copyDir(runs, tampered); err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(tampered)
	if len(es) < 2 {
		t.Fatalf("%d runs", len(es))
	}
	other, _ := os.ReadFile(filepath.Join(tampered, es[1].Name(), "attestation.json"))
	write(filepath.Join("tampered", es[0].Name(), "attestation.json"), other)

	for _, c := range []struct {
		name, cell, runs, code string
	}{
		{"a flipped signature byte", write("flipped.json", fb), "", "proof-signature"},
		{"a run that is not its subject", cell, tampered, "proof-subject"},
		{"a missing tier", write("missing.json", missing), "", "proof-tier"},
		{"a duplicated tier", write("dup.json", dup), "", "proof-tier"},
	} {
		args := []string{"--home", home, "proof", "verify", c.cell, "--trust-host"}
		if c.runs != "" {
			args = append(args, "--runs", c.runs)
		}
		code, out, errOut := sandboxEngine(t, args...)
		if code != 4 || !strings.Contains(out, "FAIL") || !strings.Contains(out, c.code+":") {
			t.Errorf("%s: exit %d, want 4 and %s:\n%s%s", c.name, code, c.code, out, errOut)
		}
	}
}

// TestProofRunNoPack: with no pack, proof run says so, and makes no cell.
func TestProofRunNoPack(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := sandboxEngine(t, "--home", t.TempDir(), "proof", "run", "--pack", filepath.Join(dir, "nopack"), "--out", filepath.Join(dir, "cell.json"))
	if code != 3 || !strings.Contains(errOut, "no conformance pack there") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "cell.json")); err == nil {
		t.Error("a cell was written")
	}
}
