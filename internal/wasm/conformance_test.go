package wasm

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor/executortest"
)

// S2 passes the executor conformance suite, with guests/c/conform.c: a
// refusal is a host call its grants do not allow (reading a file outside
// its storage grant), in the run's log. It opens no sessions.
func TestConformance(t *testing.T) {
	w := executortest.Wasm{Image: cGuest(t, "conform")}
	executortest.Run(t, w.Subject(testExec, t.TempDir()))
}
