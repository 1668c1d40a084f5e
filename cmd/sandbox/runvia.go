package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/grant"
)

// service is the running service the CLI talks to, if any: the one
// $SANDBOX_HOST names (forced: it must answer), else the state
// directory's socket when there is one.
func (g *globals) service() (cl *client.Client, forced bool, err error) {
	forced = os.Getenv(EnvHost) != ""
	cl, err = g.client()
	if !forced && errors.As(err, new(noService)) {
		return nil, false, nil
	}
	return cl, forced, err
}

// runSpec is a run's command line as the service takes it: the grants
// resolved here (relative paths against this directory, --grants files
// read), the limits of the flags.
func runSpec(g *globals, args []string, env map[string]string, s grant.Set, tierArg string, escalate bool, deadline time.Duration) (client.ExecSpec, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return client.ExecSpec{}, err
	}
	gj, _, err := s.Canonical()
	if err != nil {
		return client.ExecSpec{}, err
	}
	x := client.ExecSpec{Args: args, Env: env, Dir: cwd, GrantsJSON: gj, Tier: tierArg, Escalate: escalate, DeadlineMS: deadline.Milliseconds()}
	switch {
	case deadline == 0:
		x.DeadlineMS = -1 // none
	case x.DeadlineMS == 0:
		x.DeadlineMS = 1
	}
	mem, err := grant.ParseSize(g.memory)
	if err != nil {
		return client.ExecSpec{}, errs.Usage{Err: fmt.Errorf("--memory: %w", err)}
	}
	x.Limits = &client.Limits{MemoryBytes: mem, Pids: g.pids, CPUMillis: int64(g.cpus*1000 + 0.5), MemoryPages: int64(g.memoryPages)}
	return x, nil
}

// runOutput is what run says at the end, wherever the run was made.
type runOutput struct {
	quiet        bool
	json, idFile string
}

// finish says what became of a sealed run, for people or as --json,
// writes --id-file, and exits as the run table says.
func (o runOutput) finish(cmd *cobra.Command, res *client.Result, outputClosed bool) error {
	stderr := cmd.ErrOrStderr()
	code, from := runExit(res, outputClosed, context.Cause(cmd.Context()))
	switch {
	case o.json == "-":
		// The object takes the summary's place.
	case !o.quiet:
		printSummary(stderr, res)
	case res.Outcome == nil || res.Outcome.Status != string(attest.Exited) || outputClosed:
		// Whatever the exit status does not say by itself is said, -q
		// or not.
		fmt.Fprintf(stderr, "sandbox: ended  %s\n", describeOutcome(res.Outcome))
	}
	if err := writeIDFile(o.idFile, res); err != nil {
		fmt.Fprintf(stderr, "sandbox: --id-file: %v\n", err)
		code, from = exitFailed, fromSandbox
	}
	if o.json != "" {
		if err := emitRunJSON(o.json, stderr, sealedJSON(res, code, from)); err != nil {
			fmt.Fprintf(stderr, "sandbox: --json: %v\n", err)
			code = exitFailed
		}
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}
