// Command sandbox-engine is the sandbox command line with the engine
// linked in: every command of `sandbox` runs in its process. The thin
// `sandbox` executes it, found beside it, for the commands that run the
// engine in-process (run --local or with no service, serve, doctor,
// verify, gc, mcp, image, fleet, ...); run directly it takes the same
// arguments as `sandbox`.
//
// It is also the S1 helper where no sandbox-s1 is beside it: an S1 run
// started in this process starts this binary as its init.
package main

import (
	"os"

	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/cli/engine"
	"github.com/opensubstrate/sandbox/internal/native"
)

func main() {
	if code, ok := native.Helper(); ok {
		os.Exit(code)
	}
	os.Exit(cli.Main(os.Args[1:], engine.New()))
}
