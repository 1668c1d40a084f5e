package vectors

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/jcs"
)

// jcpFiles are the JCP vectors files of the generated pack.
func jcpFiles(t *testing.T) map[string]*JCPVectors {
	t.Helper()
	files := generated(t)
	out := map[string]*JCPVectors{}
	for _, name := range []string{"positive/jcp.json", "positive/standing.json"} {
		var v JCPVectors
		if err := jcs.Unmarshal(files[name], &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = &v
	}
	return out
}

// TestJCPVectors is the reference: every case of jcp.json and
// standing.json run through this implementation (jcp.Verify for chains
// and mints, the gate with an empty ledger for decisions, the ledger's
// Verify for ledgers and amendments) ends as it expects.
func TestJCPVectors(t *testing.T) {
	for name, v := range jcpFiles(t) {
		t.Run(filepath.Base(name), func(t *testing.T) {
			for _, c := range v.Cases {
				got, err := v.Run(c)
				if got != c.Expect {
					t.Errorf("%s (%s): got %s, want %s: %v", c.Name, c.About, got, c.Expect, err)
				}
			}
		})
	}
}

// TestJCPVectorsCoverTheCodes: the vectors refuse with every JCP code
// the gate, a chain and the ledger can give, and each file has
// positives.
func TestJCPVectorsCoverTheCodes(t *testing.T) {
	seen := map[string]int{}
	kinds := map[string]int{}
	for _, v := range jcpFiles(t) {
		for _, c := range v.Cases {
			seen[c.Expect]++
			kinds[c.Kind]++
		}
	}
	for _, code := range []string{
		"ok", "chain-depth", "broken-chain", "untrusted-root", "wrong-issuer", "wrong-audience", "depth-exhausted",
		"widen-depth", "widen-images", "widen-ceiling", "widen-expiry", "widen-models", "widen-tiers", "widen-hosts",
		"widen-paths", "widen-runs", "widen-rate", "expired", "not-yet", "stale-invocation", "replay", "revoked",
		"image-not-granted", "model-not-granted", "tier-not-granted", "host-not-granted", "path-not-granted",
		"class-not-granted", "ceiling-undeclared", "over-ceiling", "runs-exhausted", "rate-exceeded", "double-spend",
		"amend-not-issuer", "amend-widens", "amend-stale",
		"malformed", "truncated", "non-canonical", "cbor-non-shortest", "cbor-unsorted-keys", "cbor-indefinite",
		"duplicate-key", "unknown-field", "missing-field", "unknown-critical", "invalid", "header", "signature", "weak-key",
		"float", "int-range",
	} {
		if seen[code] == 0 {
			t.Errorf("no case expects %s", code)
		}
	}
	for _, k := range []string{CaseChain, CaseDecision, CaseLedger, CaseAmendment, CaseMint} {
		if kinds[k] == 0 {
			t.Errorf("no case of kind %s", k)
		}
	}
}

// A second implementation, written in Python from docs/spec/jcp.md
// alone (conformance/independent/jcp.py: its own Ed25519, CBOR decoder
// and BLAKE3), agrees with every case of the committed jcp.json and
// standing.json, and of a fresh generation.
func TestIndependentJCPVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the independent JCP verifier (conformance/independent/jcp.py) needs it")
	}
	const script, blake3 = "../../conformance/independent/jcp.py", "../../testdata/vectors/blake3/test_vectors.json"
	dir := writePack(t)
	for _, pack := range []string{committed, dir} {
		for _, f := range []string{"jcp.json", "standing.json"} {
			p := filepath.Join(pack, "positive", f)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			out, err := exec.Command(py, script, "--vectors", p, blake3).CombinedOutput()
			if err != nil || !strings.Contains(string(out), " 0 disagree") {
				t.Errorf("jcp.py --vectors %s: %v\n%s", p, err, disagreements(string(out)))
			}
		}
	}
}

// disagreements are the lines of jcp.py's output that are not "ok".
func disagreements(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "ok  ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
