package bare_test

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/bare"
	"github.com/opensubstrate/sandbox/internal/executor/executortest"
)

// S0 passes the executor conformance suite. It enforces no grant, so its
// refusal is of a grant whose only point is a restriction (an exec
// list): refused before anything runs.
func TestConformance(t *testing.T) {
	sh := executortest.Shell{}
	s := sh.Subject(bare.Executor{})
	s.Deny = executortest.Program{Job: sh.Job("echo ran", "exec:allow:b3:0000000000000000000000000000000000000000000000000000000000000000"), Refused: true}
	executortest.Run(t, s)
}
