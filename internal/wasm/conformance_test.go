package wasm

import (
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// S2 passes the executor conformance suite, with guests/conform: a
// refusal is a host call its grants do not allow (reading a file outside
// its storage grant), in the run's log. It opens no sessions.
func TestConformance(t *testing.T) {
	img := goGuest(t, "conform")
	job := func(grants []string, args ...string) func(t *testing.T) *executor.Job {
		return func(t *testing.T) *executor.Job {
			g, err := grant.ParseArgs(append([]string{"cpu:1000000J"}, grants...), "/")
			if err != nil {
				t.Fatal(err)
			}
			u := unit.Unit{Kind: tier.Wasm, Entry: "conform.wasm", Args: append([]string{"conform.wasm"}, args...)}
			return &executor.Job{Unit: u, Image: img, Grants: g}
		}
	}
	dir := t.TempDir()
	executortest.Run(t, executortest.Subject{
		Executor: testExec,
		Print:    executortest.Program{Job: job(nil, "print"), Stdin: "in\n", Stdout: "in\n", Stderr: "err\n", Code: 3},
		Hang:     executortest.Program{Job: job(nil, "hang"), Ready: "ready"},
		Deny: executortest.Program{Job: job([]string{"fs:" + dir + ":ro"}, "open", filepath.Join(filepath.Dir(dir), "outside")),
			Denied: &executortest.Denial{Kind: grant.KindFS, Target: filepath.Join(filepath.Dir(dir), "outside")}},
	})
}
