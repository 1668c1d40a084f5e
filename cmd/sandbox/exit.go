package main

import (
	"context"
	"errors"
	"syscall"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host"
)

// The exit statuses of `sandbox run` that are sandbox's own (host's).
const (
	exitLimit      = host.ExitLimit
	exitFailed     = host.ExitFailed
	exitCannotExec = host.ExitCannotExec
	exitNotFound   = host.ExitNotFound
	exitSignalBase = host.ExitSignalBase
)

// runExitTable is the table run --help and the README give.
const runExitTable = `Exit status:
  0-255  the guest's own exit status, passed through unchanged
  128+N  the guest was ended by signal N (S1: e.g. 139 for SIGSEGV), or
         sandbox got signal N and ended the run: 130 SIGINT, 143 SIGTERM,
         129 SIGHUP, 141 when the reader of its output went away
  124    the guest was stopped at a limit it was given: --deadline, its
         fuel, or a joule budget (like timeout(1))
  134    the guest trapped (WebAssembly)
  137    the guest ran out of memory
  125    sandbox could not run it or refused to: a bad flag or grant, a
         tier or device this host cannot give, an internal error, or a
         run that ended but could not be sealed (the message says so)
  126    the program was found but cannot be executed: not executable,
         not a WebAssembly module, no entry point
  127    the program was not found
A guest's own 124-127 or 128+ status reads like sandbox's: --json says
which it was.`

// Whose an exit status of `sandbox run` is (--json's exit_status_from).
const (
	fromGuest   = host.FromGuest
	fromSandbox = host.FromSandbox
)

// runExit is the exit status of `sandbox run` for a sealed run, and whose
// it is, given whether its output's reader went away and the cause its
// context ended with (a signal sandbox got), if any.
func runExit(r *client.Result, outputClosed bool, cause error) (int, string) {
	var in interrupted
	switch {
	case outputClosed:
		return exitSignalBase + int(syscall.SIGPIPE), fromSandbox
	case errors.As(cause, &in) && (r.Outcome == nil || r.Outcome.Status != string(attest.Exited)):
		return exitSignalBase + int(in.sig), fromSandbox
	}
	return r.ExitStatus, r.ExitFrom
}

// runErrorExit is the exit status of `sandbox run` when it did not seal
// a run: the program not found (127) or not executable (126), sandbox
// interrupted before the guest ran (128+N), anything else 125.
func runErrorExit(err error) int {
	var in interrupted
	var pe *host.ProgramError
	var ce categorized
	switch {
	case errors.As(err, &ce) && ce.e.ExitStatus != 0:
		return ce.e.ExitStatus // the service's 126 or 127
	case errors.As(err, &pe) && pe.NotFound:
		return exitNotFound
	case errors.As(err, &pe), errors.Is(err, executor.ErrNotExecutable):
		return exitCannotExec
	case errors.As(err, &in):
		return exitSignalBase + int(in.sig)
	case errors.Is(err, context.Canceled):
		return exitSignalBase + int(syscall.SIGINT)
	}
	return exitFailed
}
