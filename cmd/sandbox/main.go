// Command sandbox runs untrusted work at the lowest isolation tier that
// suffices, under explicit grants, and seals a signed energy receipt and
// attestation for every run; it also verifies such records.
//
// This file and its siblings only parse flags and call the packages under
// internal/ and the public record packages; see docs/ for the formats.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/state"
)

func main() {
	if code, ok := native.Helper(); ok {
		os.Exit(code)
	}
	os.Exit(cli(os.Args[1:]))
}

// cli is the command line after the S1 helper's check: a context that
// ends on SIGINT, SIGTERM or SIGHUP (a closed terminal), with the signal
// as its cause, then the command.
func cli(args []string) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// A closed stdout is an error on write, not a death by SIGPIPE: a run
	// whose reader went away is ended and sealed (exit 141). Notify, not
	// Ignore: an ignored signal would stay ignored in the programs run.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		for s := range sigs {
			cancel(interrupted{s.(syscall.Signal)})
		}
	}()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// interrupted is the cause of a context ended by a signal sandbox got.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// Unwrap makes it a context.Canceled.
func (i interrupted) Unwrap() error { return context.Canceled }

// exitError carries an exit status chosen by a command (a guest's status,
// or the verdict of a verification) without an error message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// global flags
type globals struct {
	home        string
	memoryPages uint32
	memory      string
	pids        int64
	cpus        float64
	stderr      io.Writer       // warnings
	warm        bool            // keep a started S1 init ready (serve)
	log         *slog.Logger    // the service's structured log
	hosts       []*live.Manager // made by this command; closed when it ends (their leases)
}

func (g *globals) stateDir() (*state.Dir, error) {
	root := g.home
	if root == "" {
		var err error
		if root, err = state.Default(os.Getenv); err != nil {
			return nil, err
		}
	}
	return state.Open(root)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stderr: stderr}
	defer func() {
		for _, h := range g.hosts {
			h.Close()
		}
	}()
	root := &cobra.Command{
		Use:   "sandbox",
		Short: "Run untrusted work isolated, granted, metered and attested",
		Long: `sandbox runs a unit of work (a WASM module or a native program) at the lowest
isolation tier of the ladder S0-S7 that its grants require, lets it touch
only what it was granted, meters its energy per device class with honest
provenance, and seals a signed JCR-1 energy receipt and an Ed25519
attestation that anyone can verify with 'sandbox verify'.

State (host key, runs, caches) lives in $SANDBOX_HOME, else
$XDG_STATE_HOME/sandbox, else ~/.local/state/sandbox.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return errs.Usage{Err: err} })
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.home, "home", "", "state directory (overrides $SANDBOX_HOME)")
	root.AddCommand(runCmd(g), runsCmd(g), showCmd(g), verifyCmd(g), replayCmd(g), doctorCmd(g), gcCmd(g),
		hashCmd(), keyCmd(g), grantsCmd(), manifestCmd(g), imageCmd(g), fleetCmd(g), vectorsCmd(), versionCmd(),
		serveCmd(g), createCmd(g), poolsCmd(g), execCmd(g), cpCmd(g), lsCmd(g), psCmd(g), rmCmd(g),
		suspendCmd(g), resumeCmd(g), closeCmd(g), seedCmd(g), preservationCmd(g), mcpCmd(g), recordsCmd(g), recordCmd(g), exportCmd(g), importCmd(g), vmCmd(g), policyCmd(g))

	c, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintf(stderr, "sandbox: %v\n", err)
	if c != nil && (c.Name() == "run" || c.Name() == "exec") && c.Parent() == root {
		// run's and exec's statuses are the guest's; their own are
		// 125-127 (exit.go).
		return runErrorExit(err)
	}
	if isUsage(err) {
		return errs.ExitCode(errs.Invalid)
	}
	return errs.ExitCode(errs.Of(err))
}

// isUsage recognises cobra's own argument and flag errors.
func isUsage(err error) bool {
	var u errs.Usage
	return errors.As(err, &u)
}

// usageArgs wraps a cobra argument validator so its errors are usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return errs.Usage{Err: err}
		}
		return nil
	}
}
