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
		"internal/lifecycle", "internal/fuel", "internal/gitobj", "internal/volume", "internal/audit", "internal/vm/wire"}
	backends = []string{"internal/bare", "internal/native", "internal/wasm", "internal/vm"}
	// Who may import a backend: the built-in list, the tests' helpers,
	// the commands, the backends' own parts.
	backendUsers = []string{"internal/executors", "internal/host/hosttest", "internal/live", "cmd"}
	public       = []string{"addr", "attest", "client", "device", "energy", "key", "receipt", "record", "reject", "tier", "verify"}
	// The formats a public package may be written in.
	formats = []string{"internal/jcs", "internal/detcbor", "internal/chain", "internal/safefile", "internal/grant", "internal/journal", "internal/unit", "internal/hostpath", "internal/crash"}
)

func TestImportRules(t *testing.T) {
	m := modulePackages(t)
	check := func(p, imp, rule string) {
		t.Errorf("%s imports %s: %s", p, imp, rule)
	}
	for p, imps := range m {
		for _, i := range imps {
			switch {
			case under(p, leaves...) && !sameLeaf(p, i):
				check(p, i, "a leaf imports nothing of the module")
			case p == "internal/errs" && i != "reject":
				check(p, i, "the category map imports no domain package")
			case backendOf(i) != "" && backendOf(p) != "" && backendOf(i) != backendOf(p):
				check(p, i, "a backend never imports another")
			case backendOf(i) != "" && backendOf(p) == "" && !under(p, backendUsers...):
				check(p, i, "only the built-in list (and tests' helpers, the commands) import a backend")
			case p == "internal/host" && under(i, "internal/live", "internal/server", "internal/mcp"):
				check(p, i, "the engine knows nothing above it")
			case under(p, "internal/live") && under(i, "internal/server", "internal/mcp"):
				check(p, i, "live knows nothing above it")
			case p == "client":
				check(p, i, "the client imports nothing of the module")
			case p == "internal/mcp" && i != "client" && i != "internal/errs":
				check(p, i, "the MCP server is a thin caller of the client")
			case slices.Contains(public, p) && strings.HasPrefix(i, "internal/") && !slices.Contains(formats, i):
				check(p, i, "a public package is written only in the formats")
			case !strings.HasSuffix(p, "test") && strings.HasSuffix(i, "test") && under(i, "internal"):
				check(p, i, "a test helper package is imported by tests only")
			}
		}
	}
}

// The rules catch what they are for: a made-up import graph breaking
// each is refused.
func TestRulesCatchBreaks(t *testing.T) {
	for _, tc := range []struct{ p, i string }{
		{"internal/vm", "internal/native"},
		{"internal/host", "internal/live"},
		{"internal/server", "internal/wasm"},
		{"addr", "key"},
		{"internal/errs", "internal/grant"},
	} {
		broke := backendOf(tc.i) != "" && backendOf(tc.p) != "" && backendOf(tc.i) != backendOf(tc.p) ||
			backendOf(tc.i) != "" && backendOf(tc.p) == "" && !under(tc.p, backendUsers...) ||
			tc.p == "internal/host" && under(tc.i, "internal/live") ||
			under(tc.p, leaves...) || tc.p == "internal/errs" && tc.i != "reject"
		if !broke {
			t.Errorf("%s importing %s is not caught", tc.p, tc.i)
		}
	}
}
