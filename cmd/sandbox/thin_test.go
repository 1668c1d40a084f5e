package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The thin program (this package's main) as a user runs it: built, with
// sandbox-engine beside it or without. Here sandbox-engine is this test
// binary acting as the CLI (cliEnv), which runs every command
// in-process exactly as cmd/sandbox-engine does.

// engineOnly are the packages the thin program must not link: the
// engine, the executors, the WASM runtime, SQLite, the MCP SDK. Go
// initialises every package a program links before main.
var engineOnly = []string{
	"github.com/opensubstrate/sandbox/internal/host",
	"github.com/opensubstrate/sandbox/internal/live",
	"github.com/opensubstrate/sandbox/internal/server",
	"github.com/opensubstrate/sandbox/internal/mcp",
	"github.com/opensubstrate/sandbox/internal/native",
	"github.com/opensubstrate/sandbox/internal/wasm",
	"github.com/opensubstrate/sandbox/internal/vm",
	"github.com/opensubstrate/sandbox/internal/store",
	"github.com/opensubstrate/sandbox/internal/cli/engine",
	"github.com/tetratelabs/wazero",
	"modernc.org/sqlite",
	"modernc.org/libc",
	"github.com/modelcontextprotocol/go-sdk",
	"github.com/google/jsonschema-go",
	"github.com/elastic/go-seccomp-bpf",
	"github.com/landlock-lsm/go-landlock",
	"encoding/gob",
}

func isEngineOnly(pkg string) bool {
	for _, p := range engineOnly {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}

// slowToStart are packages whose initialisers would cost the thin
// program's start (docs/cli.md, "Start-up"): it must not link them,
// unless go.mod replaces the package's module with the directory
// unless names.
var slowToStart = []struct{ pkg, unless, why string }{
	{"github.com/dustin/go-humanize", "", "it compiles a regular expression and builds tables of big integers before main: sizes are cli.IBytes"},
	{"github.com/klauspost/cpuid/v2", "./third_party/cpuid", "it executes some forty CPUIDs before main: go.mod replaces it with ./third_party/cpuid"},
	{"net/http", "", "its initialisers and the TLS it brings cost a fifth of the thin program's start: package client speaks HTTP/1.1 through internal/h1"},
	{"crypto/tls", "", "linked for its types alone it adds a fifth of an empty program's start: an https:// service is sandbox-engine's (client.Options.DialTLS)"},
}

// thinDeps are the thin program's packages, as the build lists them,
// each with the directory go.mod replaces its module with ("" where
// none).
func thinDeps(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{with .Replace}}{{.Path}}{{end}}{{end}}",
		"github.com/opensubstrate/sandbox/cmd/sandbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, replace, _ := strings.Cut(l, " ")
		deps[p] = replace
	}
	return deps
}

// TestThinLinksNoEngine: the thin program's packages, as the build
// lists them, hold none of the engine's.
func TestThinLinksNoEngine(t *testing.T) {
	t.Parallel()
	for p := range thinDeps(t) {
		if isEngineOnly(p) {
			t.Errorf("cmd/sandbox links %s", p)
		}
	}
}

// TestThinLinksNothingSlowToStart: nor any package whose initialisers
// are slow (but as go.mod replaces it).
func TestThinLinksNothingSlowToStart(t *testing.T) {
	t.Parallel()
	deps := thinDeps(t)
	for _, s := range slowToStart {
		if replace, ok := deps[s.pkg]; ok && (s.unless == "" || replace != s.unless) {
			t.Errorf("cmd/sandbox links %s: %s", s.pkg, s.why)
		}
	}
}

// thinProgram builds the thin program as the README's Install section
// does (Go's build cache makes it quick after the first) and returns
// its path.
func thinProgram(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox")
	cmd := exec.Command("go", "build", "-o", p, "github.com/opensubstrate/sandbox/cmd/sandbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/sandbox: %v\n%s", err, out)
	}
	return p
}

// installed is the thin program built (thinProgram) in a directory of
// its own, with this test binary as sandbox-engine beside it when engine
// is set.
func installed(t *testing.T, built string, engine bool) string {
	t.Helper()
	dir := t.TempDir()
	// A link, not a copy: a file this process held open for writing
	// would be inherited by a program another test starts meanwhile,
	// and executing it would fail with ETXTBSY until that one execs.
	p := filepath.Join(dir, "sandbox")
	if err := os.Link(built, p); err != nil {
		t.Fatal(err)
	}
	if engine {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(self, filepath.Join(dir, "sandbox-engine")); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// thin runs the program at bin with a state directory and extra
// environment.
func thin(t *testing.T, bin, home string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--home", home}, args...)...)
	cmd.Env = append(append(os.Environ(), cliEnv+"=1"), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestThinProgram: the thin program initialises none of the engine's
// packages; it hands the engine's commands (their help, completions and
// exit statuses included) to sandbox-engine beside it, and says how to
// build one when there is none, while everything it does itself works
// without one.
func TestThinProgram(t *testing.T) {
	t.Parallel()
	built := thinProgram(t)
	bin := installed(t, built, true)
	home := t.TempDir()

	// What Go initialises before main, as the runtime reports it.
	_, trace, code := thin(t, bin, home, []string{"GODEBUG=inittrace=1"}, "version")
	if code != 0 {
		t.Fatalf("version: %d %s", code, trace)
	}
	inits := 0
	for _, l := range strings.Split(trace, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "init" {
			inits++
			if isEngineOnly(f[1]) {
				t.Errorf("the thin program initialises %s", f[1])
			}
		}
	}
	if inits == 0 {
		t.Fatalf("no inittrace:\n%s", trace)
	}

	out, _, code := thin(t, bin, home, nil, "version", "--json")
	var v versionJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil || code != 0 || v.Engine != filepath.Join(filepath.Dir(bin), "sandbox-engine") || v.S1Helper != v.Engine {
		t.Errorf("version --json: %d %v %s", code, err, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // in stdout, or stderr when err
		err  bool
	}{
		{"an engine command", []string{"doctor", "--json"}, 0, `"tiers"`, false},
		{"its help", []string{"help", "show"}, 0, "for a person to read", false},
		{"its -h", []string{"replay", "-h"}, 0, "from its replay journal", false},
		{"its flags' errors", []string{"runs", "--bogus"}, 2, "unknown flag: --bogus", true},
		{"its exit status", []string{"verify", "abcdef123"}, 3, `no run "abcdef123"`, false},
		{"its completions", []string{"__complete", "show", ""}, 0, "last\t", false},
		{"its subcommands", []string{"policy", "default"}, 0, "sandbox.policy/1", false},
		{"the thin program's completions", []string{"__complete", "run", "--tier", ""}, 0, "S2\tSandbox", false},
	} {
		o, e, code := thin(t, bin, home, nil, tc.args...)
		got := o
		if tc.err {
			got = e
		}
		if code != tc.code || !strings.Contains(got, tc.out) {
			t.Errorf("%s: %v: exit %d (want %d)\n%s%s", tc.name, tc.args, code, tc.code, o, e)
		}
	}

	// version catches no signal (cli.instant): a closed pipe ends it as
	// it ends any small program, by SIGPIPE, where run catches it.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr.Close()
	cmd := exec.Command(bin, "--home", home, "version")
	cmd.Stdout = pw
	err = cmd.Run()
	pw.Close()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGPIPE {
		t.Errorf("version into a closed pipe: %v, want an end by SIGPIPE", err)
	}

	// An https:// service is sandbox-engine's to talk to (the thin
	// program links no TLS): the engine's dial, refused here, is what
	// the command says.
	https := []string{"SANDBOX_HOST=https://127.0.0.1:1"}
	if o, e, code := thin(t, bin, home, https, "ps"); code != 7 || !strings.Contains(e, "connection refused") {
		t.Errorf("ps of an https:// service: exit %d (want 7), want the engine's refused dial\n%s%s", code, o, e)
	}

	// With no sandbox-engine beside it.
	alone := installed(t, built, false)
	if o, e, code := thin(t, alone, home, https, "ps"); code != 7 || !strings.Contains(e, "$SANDBOX_HOST is an https:// service, which sandbox reaches in sandbox-engine, and there is none at") {
		t.Errorf("alone: ps of an https:// service: exit %d (want 7)\n%s%s", code, o, e)
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout; stderr when code != 0
	}{
		{[]string{"doctor"}, 7, "this command runs in sandbox-engine, and there is none at " + filepath.Join(filepath.Dir(alone), "sandbox-engine") + ": build it beside"},
		{[]string{"help", "doctor"}, 7, "go build -o " + filepath.Join(filepath.Dir(alone), "sandbox-engine") + " ./cmd/sandbox-engine"},
		{[]string{"run", "--", guestPath(t, "hello")}, 125, "runs in sandbox-engine"},
		{[]string{"run", "--json", "--", guestPath(t, "hello")}, 125, `"exit_status":125`},
		{[]string{"version"}, 0, "engine: none (sandbox-engine is not beside sandbox"},
		{[]string{"--help"}, 0, "Sealed runs:"},
		{[]string{"run", "--pids", "1", "--", "/bin/true"}, 125, "--pids 1: want at least 2"},
		{[]string{"exec", "sb-000000000000", "--", "true"}, 125, "no sandbox service is running"},
		{[]string{"grants", "--grant", "fs:work:ro"}, 0, `"path":"`},
	} {
		o, e, code := thin(t, alone, home, nil, tc.args...)
		got := o
		if code != 0 {
			got = e
		}
		if code != tc.code || !strings.Contains(got, tc.out) {
			t.Errorf("alone: %v: exit %d (want %d)\n%s%s", tc.args, code, tc.code, o, e)
		}
	}
}

// TestThinProgramThroughAService: with a service running, the thin
// program alone (no sandbox-engine beside it) makes a one-shot run, its
// output, summary and exit status as ever, and lists the records.
func TestThinProgramThroughAService(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	startServe(t, home)
	alone := installed(t, thinProgram(t), false)
	hello := guestPath(t, "hello")
	o, e, code := thin(t, alone, home, nil, "run", "--", hello)
	if code != 0 || !strings.Contains(o, "hello") || !strings.Contains(e, "sandbox: run    b3:") || !strings.Contains(e, "sandbox: tier   S2") {
		t.Fatalf("run through the service: %d\n%s%s", code, o, e)
	}
	o, e, code = thin(t, alone, home, nil, "run", "--json", "--deadline", "300ms", "--", guestPath(t, "spin"))
	var r runJSON
	if err := json.Unmarshal([]byte(lastLine(e)), &r); err != nil || code != 124 || r.ExitStatus != 124 || r.ExitFrom != "sandbox" || !r.Sealed {
		t.Errorf("run --json at its deadline through the service: %d %v\n%s%s", code, err, o, e)
	}
	if o, e, code := thin(t, alone, home, nil, "records"); code != 0 || !strings.HasPrefix(o, "SANDBOX") {
		t.Errorf("records through the service: %d\n%s%s", code, o, e)
	}
	if o, e, code := thin(t, alone, home, nil, "ps", "--json"); code != 0 || strings.TrimSpace(o) != "[]" {
		t.Errorf("ps through the service: %d\n%s%s", code, o, e)
	}
}
