package engine

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/proof"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// proofEnvelope is a sealed cell of a target whose CPU is cpu, every
// tier green but S2 red when red is set.
func proofEnvelope(t *testing.T, cpu string, red bool, started string) []byte {
	t.Helper()
	c := proof.Cell{Target: proof.Target{OS: "linux", Kernel: "6.1", Arch: "amd64", CPU: cpu, Cgroup: "v2", VM: "none"}, Started: started, Ended: started,
		Substrate: proof.Substrate{Version: "test", Binary: addr.Of([]byte("binary")).String()},
		Pack:      proof.PackCounts{Address: addr.Of([]byte("pack")).String(), Vectors: 1, Passed: 1}}
	ev := proof.Evidence{Binary: []byte("binary"), Pack: []byte("pack"), Runs: map[addr.Addr][]byte{}}
	for _, tr := range tier.All {
		att := []byte("attestation of " + tr.String() + cpu)
		r := proof.TierResult{Tier: tr, State: proof.Green, Run: addr.Of(att).String(), Executor: "test"}
		if red && tr == tier.S2 {
			r = proof.TierResult{Tier: tr, State: proof.Red, Executor: "test", Error: "it failed"}
		} else {
			ev.Runs[addr.Of(att)] = att
		}
		c.Tiers = append(c.Tiers, r)
	}
	k, err := key.FromSeed(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	b, err := proof.Seal(k, c, ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProofLogMatrixCommands: the log and matrix commands as a user runs
// them under `proof`: add, verify against a checkpoint kept, prove and
// check, consistency, the matrix; a removed red cell is caught by the
// kept checkpoint.
func TestProofLogMatrixCommands(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	log := filepath.Join(dir, "proof.log")
	run := func(args ...string) (string, error) {
		g := &cli.Globals{Home: home, Stderr: &bytes.Buffer{}}
		root := &cobra.Command{Use: "proof", SilenceErrors: true, SilenceUsage: true}
		root.AddCommand(proofLogCmds(g)...)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	var cells []string
	for i, cpu := range []string{"a", "b", "a"} {
		p := filepath.Join(dir, "cell"+cpu+string(rune('0'+i))+".json")
		os.WriteFile(p, proofEnvelope(t, cpu, i == 1, "2026-01-0"+string(rune('1'+i))+"T00:00:00Z"), 0o644)
		cells = append(cells, p)
		out, err := run("log", "add", log, p)
		if err != nil || !strings.HasPrefix(out, "entry "+string(rune('0'+i))+"\nsandbox/proof-log\n") {
			t.Fatalf("add %d: %v\n%s", i, err, out)
		}
		if i == 1 {
			os.WriteFile(filepath.Join(dir, "kept.cp"), []byte(out[len("entry 1\n"):]), 0o644)
		}
	}
	kept := filepath.Join(dir, "kept.cp")
	if out, err := run("log", "verify", log, "--checkpoint", kept); err != nil || !strings.Contains(out, "OK    proof log") || !strings.Contains(out, "3 cells; extends 2 checkpoints") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	out, err := run("log", "prove", log, "1")
	if err != nil {
		t.Fatal(err, out)
	}
	pf := filepath.Join(dir, "inclusion.json")
	os.WriteFile(pf, []byte(out), 0o644)
	if out, err := run("log", "check", pf, "--cell", cells[1]); err != nil || !strings.Contains(out, "is entry 1 of sandbox/proof-log's 3") {
		t.Fatalf("check inclusion: %v\n%s", err, out)
	}
	if _, err := run("log", "check", pf, "--cell", cells[0]); !errors.Is(err, reject.ProofLogEdited) {
		t.Fatalf("another cell: %v", err)
	}
	out, err = run("log", "consistency", kept, proof.CheckpointPath(log), "--log", log)
	if err != nil {
		t.Fatal(err, out)
	}
	cf := filepath.Join(dir, "consistency.json")
	os.WriteFile(cf, []byte(out), 0o644)
	if out, err := run("log", "check", cf); err != nil || !strings.Contains(out, "2 entries extend to 3") {
		t.Fatalf("check consistency: %v\n%s", err, out)
	}
	for _, f := range []string{"text", "markdown", "html"} {
		out, err := run("matrix", log, "--format", f)
		if err != nil || !strings.Contains(out, "RED") || !strings.Contains(out, "2 targets") {
			t.Fatalf("matrix %s: %v\n%s", f, err, out)
		}
	}
	page := filepath.Join(dir, "matrix.html")
	if _, err := run("matrix", log, "--format", "html", "--out", page); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(page); !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Fatalf("--out: %.40s", b)
	}
	// The red cell removed, and the log re-signed by its keeper: the
	// checkpoint kept from before catches it.
	b, _ := os.ReadFile(log)
	lines := strings.SplitAfter(string(b), "\n")
	os.WriteFile(log, []byte(lines[0]+lines[2]), 0o600)
	os.Remove(proof.CheckpointPath(log))
	if out, err := run("log", "add", log, cells[1]); err != nil {
		t.Fatal(err, out)
	}
	if _, err := run("log", "verify", log); err != nil {
		t.Fatalf("the re-signed log against its own checkpoint: %v", err)
	}
	if _, err := run("log", "verify", log, "--checkpoint", kept); !errors.Is(err, reject.ProofLogInconsistent) {
		t.Fatalf("a removed entry: %v", err)
	}
	// A forged checkpoint: another root under the real signature.
	cp, _ := os.ReadFile(kept)
	ls := strings.Split(string(cp), "\n")
	ls[2] = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	os.WriteFile(kept, []byte(strings.Join(ls, "\n")), 0o644)
	if _, err := run("log", "verify", log, "--checkpoint", kept); !errors.Is(err, reject.ProofLogForged) {
		t.Fatalf("a forged checkpoint: %v", err)
	}
	if _, err := run("matrix", log, "--format", "pdf"); err == nil {
		t.Fatal("--format pdf accepted")
	}
}
