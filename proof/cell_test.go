package proof

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/vectors"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// packRuns are two real run directories, sealed by the conformance
// pack's published test key.
var packRuns = []string{
	"../conformance/v1/positive/run",
	"../conformance/v1/positive/record-runs/runs/98245819520266d3451c3074bb115b92542253c3dc06388f097b066f2738d1cd",
}

// testCell is a cell of a machine where S1 and S2 are green (the pack's
// runs), S0 is red and the rest unavailable, with its evidence; its
// host's key is the pack's test key.
func testCell(t testing.TB) (Cell, Evidence) {
	ev := Evidence{Binary: []byte("the engine"), Pack: []byte(`{"pack":1}`), Runs: map[addr.Addr][]byte{}}
	c := Cell{
		Substrate: Substrate{Version: "(devel)", Binary: addr.Of(ev.Binary).String()},
		Target:    Target{OS: "linux", Kernel: "6.1.0", Arch: "amd64", CPU: "a CPU", Cgroup: "v2", VM: "kvm"},
		Pack:      PackCounts{Address: addr.Of(ev.Pack).String(), Vectors: 10, Passed: 10},
		Started:   "2026-01-02T03:04:05Z", Ended: "2026-01-02T03:04:35Z",
	}
	runs := packRuns
	for _, tr := range tier.All {
		r := TierResult{Tier: tr, State: Unavailable, Reason: "no executor"}
		switch tr {
		case tier.S0:
			r = TierResult{Tier: tr, State: Red, Executor: "bare", Error: "it failed"}
		case tier.S1, tier.S2:
			b, err := os.ReadFile(filepath.Join(runs[0], verify.FileAttestation))
			if err != nil {
				t.Fatal(err)
			}
			a, err := attest.Verify(b, key.NewTrust(vectors.TestKey().Public()))
			if err != nil {
				t.Fatal(err)
			}
			runs = runs[1:]
			ev.Runs[a.Addr] = b
			r = TierResult{Tier: tr, State: Green, Executor: "x", Run: a.Addr.String()}
		}
		c.Tiers = append(c.Tiers, r)
	}
	return c, ev
}

// resign signs st as it is, checked or not: a cell a forger could make
// with the key.
func resign(t *testing.T, k key.Private, st Statement) []byte {
	t.Helper()
	body, err := jcs.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshalEnvelope(Sign(k, PayloadType, body))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runsDir copies the pack's run directories into a directory, each
// named by its address.
func runsDir(t *testing.T, ev Evidence) string {
	dir := t.TempDir()
	for _, src := range packRuns {
		b, err := os.ReadFile(filepath.Join(src, verify.FileAttestation))
		if err != nil {
			t.Fatal(err)
		}
		for a, att := range ev.Runs {
			if string(att) != string(b) {
				continue
			}
			d := filepath.Join(dir, a.Hex())
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			es, _ := os.ReadDir(src)
			for _, e := range es {
				f, _ := os.ReadFile(filepath.Join(src, e.Name()))
				if err := os.WriteFile(filepath.Join(d, e.Name()), f, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

// TestSealVerify: a sealed cell verifies under its host's key, runs
// re-verified where their directories are given; standard in-toto
// fields are where a DSSE/in-toto verifier looks for them.
func TestSealVerify(t *testing.T) {
	k := vectors.TestKey()
	c, ev := testCell(t)
	b, err := Seal(k, c, ev)
	if err != nil {
		t.Fatal(err)
	}
	// What a standard tool reads.
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			KeyID, Sig string
		} `json:"signatures"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.PayloadType != "application/vnd.in-toto+json" || len(env.Signatures) != 1 {
		t.Fatalf("envelope %v %+v", err, env)
	}
	body, _ := base64.StdEncoding.DecodeString(env.Payload)
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil || st["_type"] != StatementType || st["predicateType"] != PredicateType {
		t.Fatalf("statement %v %v", err, st)
	}
	if subs := st["subject"].([]any); len(subs) != 4 {
		t.Fatalf("subjects %v", subs)
	}

	var called []string
	v := Verifier{Trust: key.NewTrust(k.Public()), Runs: runsDir(t, ev), Run: func(dir string, host key.Public) error {
		if host != k.Public() {
			t.Errorf("run verified under %s", host)
		}
		called = append(called, dir)
		return nil
	}}
	got, err := v.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Trusted || len(got.Runs) != 2 || len(called) != 2 || got.Runs[0].Tier != tier.S1 || got.Runs[0].Dir == "" {
		t.Errorf("verified %+v, runs checked %v", got, called)
	}
	// Package verify's check of the runs, for real.
	if got, err := (Verifier{Trust: key.NewTrust(k.Public()), Runs: v.Runs}).Verify(b); err != nil || len(got.Runs) != 2 {
		t.Errorf("the runs re-verified by package verify: %v", err)
	}
	// Untrusted: the same verdict, refused as untrusted-key.
	if got, err := (Verifier{}).Verify(b); !errors.Is(err, reject.UntrustedKey) || got == nil || got.Trusted {
		t.Errorf("with no trusted key: %v", err)
	}
	// A run that does not verify is proof-run.
	v.Run = func(string, key.Public) error { return errors.New("bad run") }
	if _, err := v.Verify(b); !errors.Is(err, reject.ProofRun) {
		t.Errorf("a run that does not verify: %v", err)
	}
}

// TestVerifyRefuses: each way a cell can be wrong, with its code.
func TestVerifyRefuses(t *testing.T) {
	k := vectors.TestKey()
	c, ev := testCell(t)
	good, err := Seal(k, c, ev)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	statement := func(edit func(*Statement)) []byte {
		st := o.Statement
		st.Subject = append([]Subject(nil), st.Subject...)
		st.Predicate.Tiers = append([]TierResult(nil), st.Predicate.Tiers...)
		edit(&st)
		return resign(t, k, st)
	}
	flipped := func() []byte {
		var e Envelope
		if err := json.Unmarshal(good, &e); err != nil {
			t.Fatal(err)
		}
		sig, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
		sig[5] ^= 1
		e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
		b, _ := marshalEnvelope(e)
		return b
	}()
	otherKey := statement(func(st *Statement) { st.Predicate.Host = testKey(t, 2).Public() })
	goodRuns := runsDir(t, ev)
	badRuns := runsDir(t, ev)
	for a := range ev.Runs {
		os.WriteFile(filepath.Join(badRuns, a.Hex(), verify.FileAttestation), []byte("another attestation"), 0o644)
		break
	}
	// Each run's directory holds the other's files.
	swapped := t.TempDir()
	var names []string
	for a := range ev.Runs {
		names = append(names, a.Hex())
	}
	os.Rename(filepath.Join(goodRuns, names[0]), filepath.Join(swapped, names[1]))
	os.Rename(filepath.Join(goodRuns, names[1]), filepath.Join(swapped, names[0]))
	goodRuns = runsDir(t, ev)
	for _, c := range []struct {
		name string
		cell []byte
		runs string
		want reject.Code
	}{
		{"flipped signature byte", flipped, "", reject.ProofSignature},
		{"signed by a key other than the one it names", otherKey, "", reject.ProofSignature},
		{"a run's attestation is not its subject", good, badRuns, reject.ProofSubject},
		{"a missing tier", statement(func(st *Statement) { st.Predicate.Tiers = st.Predicate.Tiers[:7] }), "", reject.ProofTier},
		{"a duplicated tier", statement(func(st *Statement) { st.Predicate.Tiers[4] = st.Predicate.Tiers[3] }), "", reject.ProofTier},
		{"nine tiers", statement(func(st *Statement) {
			st.Predicate.Tiers = append(st.Predicate.Tiers, TierResult{Tier: tier.S7, State: Unavailable, Reason: "x"})
		}), "", reject.ProofTier},
		{"tiers out of order", statement(func(st *Statement) {
			ts := st.Predicate.Tiers
			ts[3], ts[4] = ts[4], ts[3]
		}), "", reject.ProofTier},
		{"a state that is none", statement(func(st *Statement) { st.Predicate.Tiers[3].State = "skipped" }), "", reject.ProofState},
		{"green with no run", statement(func(st *Statement) {
			st.Predicate.Tiers[1].Run = ""
			st.Subject = st.Subject[:3]
		}), "", reject.ProofState},
		{"red with no error", statement(func(st *Statement) { st.Predicate.Tiers[0].Error = "" }), "", reject.ProofState},
		{"unavailable with no reason", statement(func(st *Statement) { st.Predicate.Tiers[5].Reason = "" }), "", reject.ProofState},
		{"pack counts that do not add up", statement(func(st *Statement) { st.Predicate.Pack.Failed = 1 }), "", reject.ProofPack},
		{"a green run without its subject", statement(func(st *Statement) { st.Subject = st.Subject[:3] }), "", reject.ProofSubject},
		{"a run's subject digests another attestation", statement(func(st *Statement) {
			s := st.Subject[2]
			s.Digest = Digests([]byte("other"))
			st.Subject[2] = s
		}), goodRuns, reject.ProofSubject},
		{"the substrate's subject is not its address", statement(func(st *Statement) {
			st.Subject[0] = Subject{Name: SubjectSubstrate, Digest: Digests([]byte("another engine"))}
		}), "", reject.ProofSubject},
		{"a run's directory holds another run", good, swapped, reject.ProofSubject},
		{"a subject with only sha256", statement(func(st *Statement) {
			st.Subject[0] = Subject{Name: SubjectSubstrate, Digest: map[string]string{"sha256": st.Subject[0].Digest["sha256"]}}
		}), "", reject.ProofSubject},
		{"another statement type", statement(func(st *Statement) { st.Type = "https://in-toto.io/Statement/v0.1" }), "", reject.Unrecognised},
		{"another predicate type", statement(func(st *Statement) { st.PredicateType = "x" }), "", reject.Unrecognised},
		{"not JSON", []byte("{"), "", reject.Malformed},
		{"an unknown envelope member", []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"","signatures":[],"x":1}`), "", reject.Malformed},
		{"a payload not canonical", resignRaw(t, k, []byte(`{ "_type": 1 }`)), "", reject.NonCanonical},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Verifier{Trust: key.NewTrust(k.Public()), Runs: c.runs, Run: func(string, key.Public) error { return nil }}
			_, err := v.Verify(c.cell)
			if !errors.Is(err, c.want) {
				t.Errorf("got %v, want %s", err, c.want)
			}
		})
	}
}

func resignRaw(t *testing.T, k key.Private, body []byte) []byte {
	b, err := marshalEnvelope(Sign(k, PayloadType, body))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSealRefuses: Seal signs no cell that Check refuses, nor one
// without a green run's attestation.
func TestSealRefuses(t *testing.T) {
	k := vectors.TestKey()
	c, ev := testCell(t)
	c.Tiers = c.Tiers[1:]
	if _, err := Seal(k, c, ev); !errors.Is(err, reject.ProofTier) {
		t.Errorf("a missing tier: %v", err)
	}
	c, ev = testCell(t)
	ev.Runs = nil
	if _, err := Seal(k, c, ev); err == nil {
		t.Error("sealed without a run's attestation")
	}
}

// FuzzOpen: reading untrusted cells never panics; whatever Open accepts
// verifies or is refused with a code, never both.
func FuzzOpen(f *testing.F) {
	k := vectors.TestKey()
	c, ev := testCell(f)
	good, err := Seal(k, c, ev)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := Open(b)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("refused without a code: %v", err)
			}
			return
		}
		if o.Statement.Type != StatementType || o.Statement.PredicateType != PredicateType {
			t.Fatalf("opened a statement of another type: %+v", o.Statement)
		}
		v := Verifier{Trust: key.NewTrust(k.Public()), Run: func(string, key.Public) error { return nil }}
		if got, err := v.Verify(b); err == nil && (got == nil || !got.Trusted) {
			t.Fatal("verified, not trusted")
		}
	})
}
