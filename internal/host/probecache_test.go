package host

import (
	"context"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/tier"
)

// flakyExec is an executor whose first probes fail (a machine too loaded
// to set up the probe's child) and whose later ones pass.
type flakyExec struct {
	failures, probes int
	key              bool
}

func (f *flakyExec) Name() string    { return "flaky" }
func (f *flakyExec) Tier() tier.Tier { return tier.S1 }
func (f *flakyExec) Kind() tier.Kind { return tier.Native }
func (f *flakyExec) Run(context.Context, *executor.Job) (*executor.Result, error) {
	panic("not run")
}
func (f *flakyExec) Probe(context.Context) tier.Probe {
	f.probes++
	if f.probes <= f.failures {
		return tier.Probe{Reason: "the probe's child could not be set up"}
	}
	return tier.Probe{Available: true, Reason: "verified"}
}

// keyedFlaky is the same with a probe key, so that an available answer
// is kept in the state directory.
type keyedFlaky struct{ *flakyExec }

func (keyedFlaky) ProbeKey() (string, error) { return "k", nil }

// TestFailedProbeIsTriedAgain: an unavailable probe holds for ProbeRetry
// and is then probed again, so that a long-running service does not
// refuse a tier for the rest of its life over one failed probe; an
// available one is kept, and never probed again.
func TestFailedProbeIsTriedAgain(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		h := newHost(t)
		now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
		h.Clock = func() time.Time { return now }
		f := &flakyExec{failures: 1}
		var e executor.Executor = f
		if keyed {
			e = keyedFlaky{f}
		}
		ctx := context.Background()
		if p := h.ProbeOf(ctx, e); p.Available || f.probes != 1 {
			t.Fatalf("keyed %v: first probe %+v after %d probes", keyed, p, f.probes)
		}
		now = now.Add(ProbeRetry - time.Second)
		if p := h.ProbeOf(ctx, e); p.Available || f.probes != 1 {
			t.Fatalf("keyed %v: within ProbeRetry: %+v after %d probes, want the failure kept", keyed, p, f.probes)
		}
		now = now.Add(2 * time.Second)
		if p := h.ProbeOf(ctx, e); !p.Available || f.probes != 2 {
			t.Fatalf("keyed %v: after ProbeRetry: %+v after %d probes, want probed again", keyed, p, f.probes)
		}
		now = now.Add(time.Hour)
		if p := h.ProbeOf(ctx, e); !p.Available || f.probes != 2 {
			t.Fatalf("keyed %v: an available probe: %+v after %d probes, want it kept", keyed, p, f.probes)
		}
	}
}
