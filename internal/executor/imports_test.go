package executor_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/opensubstrate/sandbox/"

// backends are the executors' packages, each with its sub-packages.
var backends = []string{"internal/bare", "internal/native", "internal/wasm", "internal/vm"}

// hostAllowed are the backend packages the engine still imports, and
// why; the split of live sandboxes out of internal/host (issue 27)
// empties it.
var hostAllowed = map[string]string{
	"internal/native":  "sandbox.go's live S1 sessions (*native.Session)",
	"internal/vm":      "sandbox.go's live S5 sessions (*vm.Session)",
	"internal/vm/boot": "command.go recognises a VM image's manifest on a command line",
}

// backendOf is the backend a package (relative to the module) belongs
// to, or "".
func backendOf(pkg string) string {
	for _, b := range backends {
		if pkg == b || strings.HasPrefix(pkg, b+"/") {
			return b
		}
	}
	return ""
}

// pkg is one package's imports of the module's packages: direct
// (imports) and transitive (deps), relative to the module.
type pkg struct{ imports, deps []string }

// violations are the rules the module's packages break: a backend
// depends on no other backend, even through a third package; the
// contract and what backends share (internal/executor, internal/confine)
// depend on none; the engine (internal/host) imports only those
// hostAllowed names.
func violations(pkgs map[string]pkg) []string {
	var out []string
	for name, p := range pkgs {
		if name == "internal/host" {
			for _, d := range p.imports {
				if _, ok := hostAllowed[d]; backendOf(d) != "" && !ok {
					out = append(out, fmt.Sprintf("internal/host imports %s: the engine reaches executors through internal/executor, and is given them (internal/builtin)", d))
				}
			}
			continue
		}
		own := backendOf(name)
		for _, d := range p.deps {
			b := backendOf(d)
			switch {
			case b == "" || b == own:
			case own != "":
				out = append(out, fmt.Sprintf("%s (backend %s) depends on %s (backend %s): backends never import each other; move what they share below both (internal/confine)", name, own, d, b))
			case under(name, "internal/executor") || under(name, "internal/confine"):
				out = append(out, fmt.Sprintf("%s depends on %s: the executor contract and what backends share sit below every backend", name, d))
			}
		}
	}
	sort.Strings(out)
	return out
}

// under says whether name is dir or a package below it.
func under(name, dir string) bool { return name == dir || strings.HasPrefix(name, dir+"/") }

func TestViolations(t *testing.T) {
	deps := func(ds ...string) pkg { return pkg{deps: ds} }
	for _, tc := range []struct {
		name string
		pkgs map[string]pkg
		want int
	}{
		{"none", map[string]pkg{"internal/vm": deps("internal/confine", "internal/executor", "internal/vm/boot"), "internal/native/s1init": deps("internal/confine", "internal/hostpath")}, 0},
		{"vm imports native", map[string]pkg{"internal/vm": deps("internal/native")}, 1},
		{"a sub-package of one depends on a sub-package of another", map[string]pkg{"internal/vm/agent": deps("internal/native/s1init")}, 1},
		{"bare depends on wasm", map[string]pkg{"internal/bare": deps("internal/wasm")}, 1},
		{"the contract depends on a backend", map[string]pkg{"internal/executor": deps("internal/bare")}, 1},
		{"what backends share depends on one", map[string]pkg{"internal/confine/syscalls": deps("internal/native/s1init")}, 1},
		{"the engine imports a backend it may not", map[string]pkg{"internal/host": {imports: []string{"internal/wasm", "internal/native", "internal/grant"}, deps: []string{"internal/wasm", "internal/native/s1init"}}}, 1},
		{"the engine reaches a backend only through one it may import", map[string]pkg{"internal/host": {imports: []string{"internal/vm"}, deps: []string{"internal/vm", "internal/vm/wire"}}}, 0},
		{"a name that only begins like a backend's", map[string]pkg{"internal/vm": deps("internal/vmx", "internal/nativex")}, 0},
	} {
		if got := violations(tc.pkgs); len(got) != tc.want {
			t.Errorf("%s: %d violations, want %d: %q", tc.name, len(got), tc.want, got)
		}
	}
}

// TestBackendsImportNoOtherBackend reads the module's packages (not
// their tests) with go list and checks the rules of violations.
func TestBackendsImportNoOtherBackend(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go tool is needed to list the module's imports: %v", err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]pkg{}
	ours := func(l string) []string {
		var out []string
		for _, d := range strings.Fields(l) {
			if strings.HasPrefix(d, module) {
				out = append(out, strings.TrimPrefix(d, module))
			}
		}
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "|")
		if len(f) != 3 || !strings.HasPrefix(f[0], module) {
			t.Fatalf("go list said %q", sc.Text())
		}
		pkgs[strings.TrimPrefix(f[0], module)] = pkg{imports: ours(f[1]), deps: ours(f[2])}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, b := range append(backends, "internal/host", "internal/executor", "internal/confine") {
		if _, ok := pkgs[b]; !ok {
			t.Fatalf("go list did not list %s: %d packages", b, len(pkgs))
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}
