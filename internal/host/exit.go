package host

import (
	"syscall"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
)

// The exit statuses of a run that are sandbox's own, chosen to be the
// ones Docker, env(1) and timeout(1) users know (docs/cli.md).
const (
	ExitLimit       = 124 // stopped at a limit it was given: deadline, fuel, energy budget
	ExitFailed      = 125 // sandbox could not run it, refused to, or could not seal it
	ExitCannotExec  = 126 // the program was found but cannot be executed
	ExitNotFound    = 127 // the program was not found
	ExitSignalBase  = 128 // + N: the guest ended by signal N, or sandbox got signal N
	ExitOutOfMemory = 128 + 9
	ExitTrapped     = 128 + 6
)

// Whose an exit status is.
const (
	FromGuest   = "guest"   // its own exit status, or 128+N for its death by signal N
	FromSandbox = "sandbox" // a limit, a refusal, a failure, an interrupt
)

// ExitStatus maps how a guest ended to an exit status, and whose it is.
func ExitStatus(res *executor.Result) (int, string) {
	o := res.Outcome
	switch o.Status {
	case attest.Exited:
		if o.ExitCode != nil {
			return *o.ExitCode & 0xff, FromGuest
		}
		return 0, FromGuest
	case attest.Deadline, attest.OutOfFuel, attest.BudgetExhausted:
		return ExitLimit, FromSandbox
	case attest.OutOfMem:
		return ExitOutOfMemory, FromSandbox
	case attest.Trapped, attest.Killed:
		if res.Signal > 0 {
			return ExitSignalBase + int(res.Signal), FromGuest
		}
		if o.Status == attest.Trapped {
			return ExitTrapped, FromSandbox
		}
		return ExitSignalBase + int(syscall.SIGKILL), FromSandbox
	case attest.Failed:
		switch {
		case res.ExecErrno == syscall.ENOENT:
			return ExitNotFound, FromSandbox
		case res.ExecErrno != 0:
			return ExitCannotExec, FromSandbox
		}
	}
	return ExitFailed, FromSandbox
}
