package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/opensubstrate/sandbox/"

// pkg is what go list says of a package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
}

// modulePackages lists the module's packages (not its tests) and the
// packages of the module each imports.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v: %s", err, ee.Stderr)
	}
	if err != nil {
		t.Skipf("go list: %v (the go command is not here)", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	m := map[string][]string{}
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		var own []string
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				own = append(own, strings.TrimPrefix(i, module))
			}
		}
		m[name] = own
	}
	if len(m) < 20 {
		t.Fatalf("go list found %d packages of the module: is this the module?", len(m))
	}
	return m
}

// under says whether p is root or below it.
func under(p string, roots ...string) bool {
	for _, r := range roots {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// sameLeaf says whether p and i are parts of one leaf (its test helper
// and itself, say).
func sameLeaf(p, i string) bool {
	for _, l := range leaves {
		if under(p, l) && under(i, l) {
			return true
		}
	}
	return false
}

// backendOf is the backend a package belongs to, or "".
func backendOf(p string) string {
	if under(p, "internal/vm/boot") {
		return "" // the VM image format: the engine reads its manifests
	}
	for _, b := range backends {
		if under(p, b) {
			return b
		}
	}
	return ""
}

var (
	leaves = []string{"addr", "device", "energy", "reject", "tier",
		"internal/crash", "internal/safefile", "internal/cgroup", "internal/hostpath", "internal/merkle",
		"internal/lifecycle", "internal/fuel", "internal/gitobj", "internal/volume", "internal/audit", "internal/vm/wire", "internal/drain", "internal/h1"}
	backends = []string{"internal/bare", "internal/native", "internal/wasm", "internal/vm"}
	// Who may import a backend: the built-in list, the tests' helpers,
	// the commands, the backends' own parts.
	backendUsers = []string{"internal/builtin", "internal/host/hosttest", "cmd"}
	public       = []string{"addr", "attest", "client", "device", "energy", "evidence", "evidence/spdm", "jcp", "key", "locality", "receipt", "record", "reject", "tier", "verify"}
	// What the locality records package may import of the module.
	localityImports = []string{"key", "addr", "reject", "internal/jcs"}
	// The formats a public package may be written in.
	formats = []string{"internal/jcs", "internal/detcbor", "internal/chain", "internal/merkle", "internal/note", "internal/safefile", "internal/grant", "internal/journal", "internal/unit", "internal/hostpath", "internal/crash", "internal/h1"}
)

// rule is the rule p importing i breaks, or "".
func rule(p, i string) string {
	switch {
	case under(p, leaves...) && !sameLeaf(p, i):
		return "a leaf imports nothing of the module"
	case p == "internal/errs" && i != "reject":
		return "the category map imports no domain package"
	case backendOf(i) != "" && backendOf(p) != "" && backendOf(i) != backendOf(p):
		return "a backend never imports another"
	case backendOf(i) != "" && backendOf(p) == "" && !under(p, backendUsers...):
		return "only the built-in list (and tests' helpers, the commands) import a backend"
	case p == "internal/host" && under(i, "internal/live", "internal/server", "internal/mcp"):
		return "the engine knows nothing above it"
	case under(p, "internal/live") && under(i, "internal/server", "internal/mcp"):
		return "live knows nothing above it"
	case under(p, "locality") && !under(i, "locality") && !slices.Contains(localityImports, i):
		return "a locality claim is made of keys, addresses, reject codes and JCS only"
	case p == "client" && i != "internal/h1":
		return "the client imports nothing of the module but the HTTP/1.1 it speaks"
	case p == "evidence/spdm" && i != "reject":
		return "the SPDM verifier imports nothing of the module but the reject codes"
	case p == "evidence" && i != "reject" && i != "evidence/spdm":
		return "the evidence verifier imports nothing of the module but the reject codes and the SPDM verifier"
	case p == "internal/mcp" && i != "client" && i != "internal/errs":
		return "the MCP server is a thin caller of the client"
	case p == "internal/console":
		return "the console's page is files: the browser calls the API, the package imports nothing of the module"
	case slices.Contains(public, p) && strings.HasPrefix(i, "internal/") && !slices.Contains(formats, i):
		return "a public package is written only in the formats"
	case !strings.HasSuffix(p, "test") && strings.HasSuffix(i, "test") && under(i, "internal"):
		return "a test helper package is imported by tests only"
	}
	return ""
}

func TestImportRules(t *testing.T) {
	for p, imps := range modulePackages(t) {
		for _, i := range imps {
			if r := rule(p, i); r != "" {
				t.Errorf("%s imports %s: %s", p, i, r)
			}
		}
	}
}

// The rules catch what they are for: each import that would break one
// is refused, and the imports the house is built on are not.
func TestRulesCatchBreaks(t *testing.T) {
	for _, tc := range []struct {
		p, i  string
		broke bool
	}{
		{"internal/vm", "internal/native", true},
		{"internal/vm", "internal/confine", false},
		{"internal/host", "internal/live", true},
		{"internal/host", "internal/native", true},
		{"internal/live", "internal/vm", true},
		{"internal/live", "internal/server", true},
		{"internal/live", "internal/host", false},
		{"internal/server", "internal/wasm", true},
		{"internal/builtin", "internal/wasm", false},
		{"cmd/sandbox-engine", "internal/builtin", false},
		{"addr", "key", true},
		{"internal/errs", "internal/grant", true},
		{"client", "internal/jcs", true},
		{"client", "internal/h1", false},
		{"internal/h1", "reject", true},
		{"internal/mcp", "internal/host", true},
		{"record", "internal/host", true},
		{"record", "internal/jcs", false},
		{"evidence/spdm", "internal/jcs", true},
		{"evidence/spdm", "key", true},
		{"evidence/spdm", "reject", false},
		{"evidence", "evidence/spdm", false},
		{"evidence", "key", true},
		{"internal/host", "internal/executor/executortest", true},
		{"locality", "internal/jcs", false},
		{"locality", "attest", true},
		{"locality", "internal/errs", true},
		{"internal/console", "client", true},
		{"internal/server", "internal/console", false},
	} {
		if got := rule(tc.p, tc.i) != ""; got != tc.broke {
			t.Errorf("%s importing %s: broke a rule %v, want %v (%q)", tc.p, tc.i, got, tc.broke, rule(tc.p, tc.i))
		}
	}
}
