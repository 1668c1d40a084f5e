package vectors

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/jcs"
)

// TestEvidenceVectors: every case of a fresh evidence.json ends, through
// verify.Evidence, as it expects; the cases cover the refusals the
// binding rule and its run verifier give; and a generation is
// byte-identical to the next and to the committed file.
func TestEvidenceVectors(t *testing.T) {
	b, err := evidenceVectors()
	if err != nil {
		t.Fatal(err)
	}
	again, err := evidenceVectors()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, again) {
		t.Error("two generations of evidence.json differ")
	}
	if old, err := os.ReadFile(filepath.Join(committed, "evidence", "evidence.json")); err != nil || !bytes.Equal(old, b) {
		t.Errorf("the committed evidence.json is not what generation gives (%v): run sandbox-engine vectors gen conformance/v1", err)
	}
	var v EvidenceVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range v.Cases {
		if got, err := RunEvidence(c); got != c.Expect {
			t.Errorf("%s (%s): got %s, want %s: %v", c.Name, c.About, got, c.Expect, err)
		}
		seen[c.Expect] = true
	}
	for _, code := range []string{"ok", "evidence-software", "evidence-report-data", "evidence-signature", "evidence-malformed",
		"invalid", "evidence-cert", "evidence-expired", "evidence-unsupported"} {
		if !seen[code] {
			t.Errorf("no case expects %s", code)
		}
	}
}

// A case that is not what it says (its claim edited after sealing, so
// that it no longer cites its evidence's address or no longer has its
// binding) is refused as a case, not run.
func TestEvidenceCaseChecked(t *testing.T) {
	b, err := evidenceVectors()
	if err != nil {
		t.Fatal(err)
	}
	var v EvidenceVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	ok := v.Cases[0]
	for name, change := range map[string]func(*EvidenceCase){
		"other evidence":  func(c *EvidenceCase) { c.Evidence = v.Cases[len(v.Cases)-1].Evidence },
		"other binding":   func(c *EvidenceCase) { c.Binding = strings.Repeat("00", 64) },
		"other at":        func(c *EvidenceCase) { c.At = "2026-01-01T00:00:02.000000000Z" },
		"claim not canon": func(c *EvidenceCase) { c.Claim = "{ " + c.Claim[1:] },
	} {
		c := ok
		change(&c)
		if got, err := RunEvidence(c); got != "case" {
			t.Errorf("%s: got %s (%v), want case", name, got, err)
		}
	}
}

// The embedded samples are evidence/testdata's bytes.
func TestEvidenceSamples(t *testing.T) {
	for name, b := range map[string][]byte{"test-report.bin": sampleSNPReport, "test-vcek.der": sampleSNPVCEK, "tdx_quote_4.dat": sampleTDXQuote} {
		want, err := os.ReadFile(filepath.Join("..", "..", "evidence", "testdata", name))
		if err != nil || !bytes.Equal(b, want) {
			t.Errorf("samples/%s is not evidence/testdata/%s (%v)", name, name, err)
		}
	}
}

// A second implementation, written in Python from docs/spec/attestation.md
// and docs/spec/evidence.md alone (conformance/independent/evidence.py:
// its own JCS, SHA-512 binding, report_data offsets and Ed25519), agrees
// with every case of the committed evidence.json and of a fresh
// generation, but for the vendors' chains and signatures, which it says
// it does not check.
func TestIndependentEvidenceVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the independent evidence verifier (conformance/independent/evidence.py) needs it")
	}
	const script = "../../conformance/independent/evidence.py"
	b, err := evidenceVectors()
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "evidence.json")
	if err := os.WriteFile(fresh, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(committed, "evidence", "evidence.json"), fresh} {
		out, err := exec.Command(py, script, "--vectors", p).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " 0 disagreements") {
			t.Errorf("evidence.py --vectors %s: %v\n%s", p, err, disagreements(string(out)))
		}
	}
}
