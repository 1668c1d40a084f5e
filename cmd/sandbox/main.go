// Command sandbox runs untrusted work at the lowest isolation tier that
// suffices, under explicit grants, and seals a signed energy receipt and
// attestation for every run; it also verifies such records.
//
// This is the thin program: the command line (package internal/cli)
// with no engine linked in, so that it starts like a small program.
// Through a running service it makes runs, execs and every live-sandbox
// call itself; the commands that run the engine in this process (run
// --local or with no service, serve, doctor, verify, gc, mcp, image,
// fleet, ...) it hands to sandbox-engine, found beside it, by executing
// it with the same arguments. See the README's Install section.
package main

import (
	"os"

	sbcli "github.com/opensubstrate/sandbox/internal/cli"
)

func main() {
	os.Exit(sbcli.Main(os.Args[1:], nil))
}
