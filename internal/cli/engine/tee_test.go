package engine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/cli"
)

// TestTEEVerify: `sandbox tee verify` as a user runs it: real evidence
// verifies (exit 0) at a pinned time and says what it is; the same
// evidence at a time its chain is not valid, or with another chip's
// certificate, is refused (exit 4) with the code in --json; a bad
// policy is a usage error (2); a missing file is not found (3).
func TestTEEVerify(t *testing.T) {
	td := filepath.Join("..", "..", "..", "evidence", "testdata")
	report, vcek := filepath.Join(td, "test-report.bin"), filepath.Join(td, "test-vcek.der")
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	sw, err := evidence.SignSoftware(priv, [64]byte{1}, [48]byte{2}, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	soft := filepath.Join(t.TempDir(), "software.bin")
	os.WriteFile(soft, sw, 0o644)
	bad := filepath.Join(t.TempDir(), "policy.json")
	os.WriteFile(bad, []byte(`{"vmpl": 9}`), 0o644)
	for _, c := range []struct {
		name string
		args []string
		code int
		want string // in --json's code, or in the output
	}{
		{"verified", []string{report, "--cert", vcek, "--at", "2024-06-01T00:00:00Z"}, 0, "sev-snp v2, Milan, signed by its VCEK, at 2024-06-01T00:00:00Z"},
		{"expired", []string{report, "--cert", vcek, "--at", "2031-01-01T00:00:00Z", "--json"}, 4, `"code": "evidence-expired"`},
		{"another chip", []string{report, "--cert", filepath.Join(td, "vcek.testcer"), "--at", "2024-06-01T00:00:00Z", "--json"}, 4, `"code": "evidence-signature"`},
		{"genoa roots", []string{report, "--cert", vcek, "--at", "2024-06-01T00:00:00Z", "--product", "Genoa", "--json"}, 4, `"code": "evidence-chain"`},
		{"tdx v5", []string{filepath.Join(td, "tdx_quote_5.dat"), "--json"}, 4, `"code": "evidence-unsupported"`},
		{"gpu", []string{filepath.Join(td, "..", "spdm", "testdata", "hopperAttestationReport.txt"), "--cert", filepath.Join(td, "..", "spdm", "testdata", "hopper_cert_chain_case1.txt"), "--at", "2024-06-01T00:00:00Z"}, 0, "nvidia-spdm v17, NVIDIA GPU"},
		{"software refused", []string{soft, "--json"}, 4, `"code": "evidence-software"`},
		{"software allowed", []string{soft, "--allow-software"}, 0, "SOFTWARE-GROUNDED"},
		{"bad policy", []string{report, "--cert", vcek, "--policy", bad}, 2, "policy.vmpl"},
		{"bad time", []string{report, "--at", "yesterday"}, 2, "--at"},
		{"no file", []string{filepath.Join(td, "nope")}, 3, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := runEngine(t, &out, &errOut, append([]string{"tee", "verify"}, c.args...)...)
			if code != c.code || !strings.Contains(out.String()+errOut.String(), c.want) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s%s", code, c.code, c.want, out.String(), errOut.String())
			}
			if strings.Contains(strings.Join(c.args, " "), "--json") {
				var v TEEVerifyJSON
				if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.OK != (code == 0) || v.At == "" {
					t.Fatalf("--json: %v %+v", err, v)
				}
			}
		})
	}
}

func runEngine(t *testing.T, out, errOut *bytes.Buffer, args ...string) int {
	t.Helper()
	return cli.Run(context.Background(), append([]string{"--home", t.TempDir()}, args...), out, errOut, New())
}
