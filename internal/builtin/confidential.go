package builtin

import (
	"context"
	"fmt"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// s1Like is what an S6 executor needs of the executor it runs in: an
// executor with S1's capabilities, which it passes on.
type s1Like interface {
	executor.Executor
	executor.Helpers
	executor.Limiter
	executor.Prewarmer
	executor.ProbeKeyer
}

// confidential is the S6 executor: S1's confinement on a host whose
// provider vouches for it with hardware evidence per run (on a
// confidential VM, configfs-tsm: the whole host, S1 among it, is inside
// the TEE). Its probe is the provider's and S1's together; its runs are
// S1's; the engine seals each run's evidence (executor.Evidencer).
type confidential struct {
	in       s1Like
	provider tee.Provider
}

func (c confidential) Name() string    { return c.in.Name() + "+" + c.provider.Name() }
func (c confidential) Tier() tier.Tier { return tier.S6 }
func (c confidential) Kind() tier.Kind { return c.in.Kind() }

// Probe is available when the provider can give evidence here and S1's
// confinement applies.
func (c confidential) Probe(ctx context.Context) tier.Probe {
	pp := c.provider.Probe()
	if !pp.Available {
		return tier.Probe{Reason: fmt.Sprintf("no hardware evidence (%s): %s", c.provider.Name(), pp.Reason)}
	}
	ip := c.in.Probe(ctx)
	if !ip.Available {
		return tier.Probe{Reason: "S6 runs in S1's confinement, unavailable here: " + ip.Reason, Layers: ip.Layers}
	}
	return tier.Probe{Available: true, Reason: fmt.Sprintf("%s; evidence per run from %s: %s", ip.Reason, c.provider.Name(), pp.Reason), Layers: ip.Layers}
}

func (c confidential) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	r, err := c.in.Run(ctx, j)
	if r != nil {
		r.Executor = c.Name()
	}
	return r, err
}

// Evidence asks the provider for evidence bound to data.
func (c confidential) Evidence(ctx context.Context, data [tee.ReportDataSize]byte) (tee.Evidence, error) {
	return c.provider.Evidence(ctx, data)
}

func (c confidential) Helpers() []string          { return c.in.Helpers() }
func (c confidential) DefaultLimits() unit.Limits { return c.in.DefaultLimits() }
func (c confidential) Prewarm()                   { c.in.Prewarm() }

// ProbeKey is S1's, the provider named: the provider's answer holds for
// the boot as S1's does (a confidential VM stays one).
func (c confidential) ProbeKey() (string, error) {
	k, err := c.in.ProbeKey()
	if err != nil {
		return "", err
	}
	return k + "|s6|" + c.provider.Name(), nil
}
