package proof

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// testCell is a cell of a machine where S1 and S2 are green, S3 and S4
// are unavailable and S0 is red, with its evidence.
func testCell() (Cell, Evidence) {
	ev := Evidence{Binary: []byte("the engine"), Pack: []byte(`{"pack":1}`), Runs: map[addr.Addr][]byte{}}
	c := Cell{
		Substrate: Substrate{Version: "(devel)", Binary: addr.Of(ev.Binary).String()},
		Target:    Target{OS: "linux", Kernel: "6.1.0", Arch: "amd64", CPU: "a CPU", Cgroup: "v2", VM: "kvm"},
		Pack:      PackCounts{Address: addr.Of(ev.Pack).String(), Vectors: 10, Passed: 10},
		Started:   "2026-01-02T03:04:05Z", Ended: "2026-01-02T03:04:35Z",
	}
	for _, t := range tier.All {
		r := TierResult{Tier: t, State: Unavailable, Reason: "no executor"}
		switch t {
		case tier.S0:
			r = TierResult{Tier: t, State: Red, Executor: "bare", Error: "it failed"}
		case tier.S1, tier.S2:
			att := []byte("attestation of " + t.String())
			ev.Runs[addr.Of(att)] = att
			r = TierResult{Tier: t, State: Green, Executor: "x", Run: addr.Of(att).String()}
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

// runsDir writes a directory of run directories holding the evidence's
// attestations.
func runsDir(t *testing.T, ev Evidence) string {
	dir := t.TempDir()
	for a, b := range ev.Runs {
		d := filepath.Join(dir, a.Hex())
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, verify.FileAttestation), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSealVerify: a sealed cell verifies under its host's key, runs
// re-verified where their directories are given; standard in-toto
// fields are where a DSSE/in-toto verifier looks for them.
func TestSealVerify(t *testing.T) {
	k := testKey(t, 1)
	c, ev := testCell()
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
	k := testKey(t, 1)
	c, ev := testCell()
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
	badRuns := runsDir(t, ev)
	for a := range ev.Runs {
		os.WriteFile(filepath.Join(badRuns, a.Hex(), verify.FileAttestation), []byte("another attestation"), 0o644)
		break
	}
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
		{"a subject of another run", statement(func(st *Statement) {
			s := st.Subject[2]
			s.Digest = Digests([]byte("other"))
			st.Subject[2] = s
		}), "", reject.ProofSubject},
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
	k := testKey(t, 1)
	c, ev := testCell()
	c.Tiers = c.Tiers[1:]
	if _, err := Seal(k, c, ev); !errors.Is(err, reject.ProofTier) {
		t.Errorf("a missing tier: %v", err)
	}
	c, ev = testCell()
	ev.Runs = nil
	if _, err := Seal(k, c, ev); err == nil {
		t.Error("sealed without a run's attestation")
	}
}

// FuzzOpen: reading untrusted cells never panics; whatever Open accepts
// verifies or is refused with a code, never both.
func FuzzOpen(f *testing.F) {
	k := testKey(f, 1)
	c, ev := testCell()
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
