package hosttest

import (
	"context"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/tier"
)

// TEE stands where a confidential-computing executor would (S6 and S7
// need a TEE this machine does not have: the hardware edge). It runs
// each unit on the executor it holds and says it is S7: what is under
// test is the host's audit trail around it, and, like every executor,
// it passes the conformance suite.
type TEE struct{ executor.Executor }

// Name names the stand-in.
func (TEE) Name() string { return "tee-stand-in/0" }

// Tier is S7.
func (TEE) Tier() tier.Tier { return tier.S7 }

// Probe says it is a stand-in.
func (TEE) Probe(context.Context) tier.Probe {
	return tier.Probe{Available: true, Reason: "a test's stand-in for a TEE"}
}

// Run runs the unit on the held executor, under the stand-in's name.
func (e TEE) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	res, err := e.Executor.Run(ctx, j)
	if res != nil {
		res.Executor = e.Name()
	}
	return res, err
}
