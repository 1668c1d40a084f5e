package vectors

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/jcs"
)

// TestLocalityVectors: every case of a fresh locality.json ends, through
// locality.Verify, as it expects, and the cases cover every code a claim
// can be refused with.
func TestLocalityVectors(t *testing.T) {
	b, err := localityVectors()
	if err != nil {
		t.Fatal(err)
	}
	var v LocalityVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range v.Cases {
		if got, err := v.Run(c); got != c.Expect {
			t.Errorf("%s (%s): got %s, want %s: %v", c.Name, c.About, got, c.Expect, err)
		}
		seen[c.Expect] = true
	}
	for _, code := range []string{"ok", "locality-too-far", "locality-unknown-anchor", "locality-anchor-position", "locality-host",
		"locality-binding", "signature", "weak-key", "invalid", "unrecognised", "non-canonical", "unknown-field", "missing-field",
		"duplicate-key", "float", "malformed"} {
		if !seen[code] {
			t.Errorf("no case expects %s", code)
		}
	}
}

// A second implementation, written in Python from docs/spec/locality.md
// alone (conformance/independent/locality.py: its own Ed25519 and JCS
// check), agrees with every case of the committed locality.json and of a
// fresh generation.
func TestIndependentLocalityVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the independent locality verifier (conformance/independent/locality.py) needs it")
	}
	const script = "../../conformance/independent/locality.py"
	b, err := localityVectors()
	if err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "locality.json")
	if err := os.WriteFile(fresh, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(committed, "locality", "locality.json"), fresh} {
		out, err := exec.Command(py, script, "--vectors", p).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " 0 disagree") {
			t.Errorf("locality.py --vectors %s: %v\n%s", p, err, disagreements(string(out)))
		}
	}
}
