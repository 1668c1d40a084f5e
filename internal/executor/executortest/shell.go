package executortest

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// Shell makes the jobs of an executor that runs shell scripts (S0, S1,
// S5): native units by default.
type Shell struct {
	// Kind is the units' kind; default native.
	Kind tier.Kind
	// Path is the shell; default /bin/sh.
	Path string
	// Image is each unit's image (a vm unit's manifest); default the
	// shell's path.
	Image []byte
	// Env is each unit's environment; default PATH=/usr/bin:/bin.
	Env map[string]string
}

// Job makes the job that runs script under grants (command-line syntax).
func (sh Shell) Job(script string, grants ...string) func(t *testing.T) *executor.Job {
	return func(t *testing.T) *executor.Job {
		t.Helper()
		g, err := grant.ParseArgs(grants, "/")
		if err != nil {
			t.Fatal(err)
		}
		if sh.Kind == "" {
			sh.Kind = tier.Native
		}
		if sh.Path == "" {
			sh.Path = "/bin/sh"
		}
		if sh.Image == nil {
			sh.Image = []byte(sh.Path)
		}
		if sh.Env == nil {
			sh.Env = map[string]string{"PATH": "/usr/bin:/bin"}
		}
		u := unit.Unit{Kind: sh.Kind, Entry: sh.Path, Args: []string{"sh", "-c", script}, Env: sh.Env}
		return &executor.Job{Unit: u, Image: sh.Image, Grants: g}
	}
}

// Subject is a Subject of e whose Print and Hang are shell scripts:
// Print copies its stdin, writes "err" to stderr and exits 3; Hang
// leaves a child in the background (which ignores interrupts, as a
// shell's background jobs do), says "ready" and sleeps. Deny, Session and
// Unavailable are the caller's.
func (sh Shell) Subject(e executor.Executor) Subject {
	return Subject{
		Executor: e,
		Print:    Program{Job: sh.Job("cat; echo err >&2; exit 3"), Stdin: "in\n", Stdout: "in\n", Stderr: "err\n", Code: 3},
		Hang:     Program{Job: sh.Job("sleep 1000 >/dev/null 2>&1 & echo ready; exec sleep 1000"), Ready: "ready"},
	}
}

// StartScript and CheckScript are a session's Start and Check as shell
// scripts: Start leaves a file in the session's /tmp and a process in
// the background that answers on a FIFO there (ignoring the SIGPIPE of a
// reader gone); Check writes CheckOutput only when both are there (a
// reader of the FIFO gets "alive" only from a living writer: it waits up
// to a minute for one). Start's process
// holds nothing but its FIFO, and runs from /, so a guest can let go of
// what it shares with the host (S5's suspension).
const (
	StartScript = "cd /; echo kept > /tmp/conform; mkfifo /tmp/conform.fifo; (trap '' PIPE; while :; do echo alive > /tmp/conform.fifo; done) >/dev/null 2>&1 &"
	CheckScript = "cat /tmp/conform; timeout 60 head -n 1 /tmp/conform.fifo"
	CheckOutput = "kept\nalive\n"
)
