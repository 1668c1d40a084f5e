package executortest

import (
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// Wasm makes the jobs of an executor of WebAssembly units, with
// guests/c/conform.c as the program: "print" copies its stdin to stdout,
// writes "err" to stderr and exits 3; "hang" says "ready" and spins;
// "open PATH" tries to read PATH.
type Wasm struct {
	// Image is guests/c/conform.c, built (guestbuild.C("conform")).
	Image []byte
}

// Job makes the job that runs conform with args under grants
// (command-line syntax; a CPU budget large enough for the suite is
// added).
func (w Wasm) Job(grants []string, args ...string) func(t *testing.T) *executor.Job {
	return func(t *testing.T) *executor.Job {
		t.Helper()
		g, err := grant.ParseArgs(append([]string{"cpu:1000000J"}, grants...), "/")
		if err != nil {
			t.Fatal(err)
		}
		u := unit.Unit{Kind: tier.Wasm, Entry: "conform.wasm", Args: append([]string{"conform.wasm"}, args...)}
		return &executor.Job{Unit: u, Image: w.Image, Grants: g}
	}
}

// Subject is a Subject of e with conform's programs; its refusal is a
// read outside the job's storage grant (dir, read-only), in its log.
func (w Wasm) Subject(e executor.Executor, dir string) Subject {
	outside := filepath.Join(filepath.Dir(dir), "outside")
	return Subject{
		Executor: e,
		Print:    Program{Job: w.Job(nil, "print"), Stdin: "in\n", Stdout: "in\n", Stderr: "err\n", Code: 3},
		Hang:     Program{Job: w.Job(nil, "hang"), Ready: "ready"},
		Deny: Program{Job: w.Job([]string{"fs:" + dir + ":ro"}, "open", outside),
			Denied: &Denial{Kind: grant.KindFS, Target: outside}},
	}
}
