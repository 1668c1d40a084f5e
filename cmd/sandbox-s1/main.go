// Command sandbox-s1 is the inside of an S1 run: sandbox starts it as the
// run's init (internal/native/s1init). It is a separate, small binary so
// that a run starts quickly; sandbox looks for it beside itself and falls
// back to re-executing itself when it is not there.
package main

import (
	"fmt"
	"os"

	"github.com/opensubstrate/sandbox/internal/native/s1init"
)

func main() {
	code, ok := s1init.Main()
	if !ok {
		fmt.Fprintln(os.Stderr, "sandbox-s1: this is sandbox's S1 helper; it is started by sandbox, not by hand")
		os.Exit(2)
	}
	os.Exit(code)
}
