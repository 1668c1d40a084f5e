package main

import (
	"context"
	"io"

	"github.com/opensubstrate/sandbox/client"
	sbcli "github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/cli/engine"
)

// The tests run the command line as sandbox-engine runs it: every
// command in this process (run, in-process, with the tests' streams;
// cli, as the program, when the test binary acts as sandbox). The thin
// program, which hands the engine's commands to sandbox-engine, is
// built and run by thin_test.go.

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return sbcli.Run(ctx, args, stdout, stderr, engine.New())
}

func cli(args []string) int { return sbcli.Main(args, engine.New()) }

// What --json prints (docs/cli.md).
type (
	runJSON     = client.Result
	runsJSON    = engine.RunsJSON
	showJSON    = engine.ShowJSON
	verifyJSON  = engine.VerifyJSON
	doctorJSON  = engine.DoctorJSON
	versionJSON = sbcli.VersionJSON
)
