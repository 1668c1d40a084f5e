package builtin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/tee"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/reject"
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

// sovereign is the S7 executor: S6 (its confinement and evidence) plus
// a locality claim per run, measured against the configured anchors
// (package locality), and the host's audit trail (the engine's, for
// every S7 run).
type sovereign struct {
	confidential
	cfg    *locality.Config
	client *http.Client
}

func (s sovereign) Name() string    { return s.confidential.Name() + "+locality" }
func (s sovereign) Tier() tier.Tier { return tier.S7 }

// Probe is available when S6 is and a locality configuration names
// anchors and regions.
func (s sovereign) Probe(ctx context.Context) tier.Probe {
	if s.cfg == nil || len(s.cfg.Regions) == 0 {
		return tier.Probe{Reason: "no locality configuration: S7 needs anchors and named regions (SANDBOX_LOCALITY=FILE, docs/spec/locality.md)"}
	}
	p := s.confidential.Probe(ctx)
	if !p.Available {
		return tier.Probe{Reason: "S7 is S6 with a locality claim, and S6 is unavailable here: " + p.Reason, Layers: p.Layers}
	}
	p.Reason += fmt.Sprintf("; locality against %d anchor(s), regions %v", len(s.cfg.Anchors), s.cfg.RegionNames())
	return p
}

func (s sovereign) Run(ctx context.Context, j *executor.Job) (*executor.Result, error) {
	r, err := s.confidential.Run(ctx, j)
	if r != nil {
		r.Executor = s.Name()
	}
	return r, err
}

// ProbeKey is S6's, the configuration's anchors and regions named.
func (s sovereign) ProbeKey() (string, error) {
	k, err := s.confidential.ProbeKey()
	if err != nil || s.cfg == nil {
		return k + "|s7|none", err
	}
	return fmt.Sprintf("%s|s7|%d|%v", k, len(s.cfg.Anchors), s.cfg.RegionNames()), nil
}

// Region refuses a region the configuration does not name.
func (s sovereign) Region(name string) error {
	if _, ok := s.cfg.Regions[name]; !ok {
		return fmt.Errorf("%w: the grant locality:%s names no region of this host's locality configuration (it has %v)", tier.ErrUnavailable, name, s.cfg.RegionNames())
	}
	return nil
}

// anchorTimeout bounds one round trip's exchange with an anchor: a
// claim is made of the anchors that answered within it.
const anchorTimeout = 10 * time.Second

// measureRounds is how many times the host measures its anchors before
// it gives up on a region: a round trip only ever overstates the
// distance (a busy host, a queue on the way), so a claim the first
// round does not support is measured again, keeping each anchor's
// shortest round trip.
const measureRounds = 3

// Locality measures the round trip to every configured anchor at once,
// bound to binding and answered with the host key, and returns the
// claim that the host was within region, refusing one its measurements
// do not support (the host checks its claim as a verifier would). A
// claim that fails only for distance is measured again, up to
// measureRounds times.
func (s sovereign) Locality(ctx context.Context, region string, host key.Private, binding addr.Addr) ([]byte, error) {
	r, ok := s.cfg.Regions[region]
	if !ok {
		return nil, fmt.Errorf("%w: no region %q in the locality configuration (it has %v)", tier.ErrUnavailable, region, s.cfg.RegionNames())
	}
	best := make([]*locality.Measurement, len(s.cfg.Anchors))
	var lastErr error
	for round := 1; round <= measureRounds; round++ {
		ms, err := s.measure(ctx, host, binding, best)
		if err != nil {
			return nil, err
		}
		claim, err := locality.NewClaim(host.Public(), binding, r, ms)
		if err != nil {
			return nil, err
		}
		_, err = locality.Verify(claim, s.cfg.Published(), binding, host.Public())
		if err == nil {
			return claim, nil
		}
		lastErr = fmt.Errorf("the measurements do not place this host within %s (measured %d times): %w", region, round, err)
		if !errors.Is(err, reject.LocalityTooFar) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// measure takes one round trip to every anchor at once, keeps in best
// each anchor's shortest so far, and returns those it has.
func (s sovereign) measure(ctx context.Context, host key.Private, binding addr.Addr, best []*locality.Measurement) ([]locality.Measurement, error) {
	type answer struct {
		m   locality.Measurement
		err error
	}
	answers := make([]answer, len(s.cfg.Anchors))
	var wg sync.WaitGroup
	for i, a := range s.cfg.Anchors {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, anchorTimeout)
			defer cancel()
			answers[i].m, answers[i].err = locality.MeasureWith(actx, s.client, a.URL, host, binding)
		})
	}
	wg.Wait()
	var failed []error
	for i, a := range answers {
		if a.err != nil {
			failed = append(failed, fmt.Errorf("anchor %s: %w", s.cfg.Anchors[i].URL, a.err))
			continue
		}
		if best[i] == nil || a.m.Statement.RTT < best[i].Statement.RTT {
			best[i] = &a.m
		}
	}
	var ms []locality.Measurement
	for _, m := range best {
		if m != nil {
			ms = append(ms, *m)
		}
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no anchor answered: %w", errors.Join(failed...))
	}
	return ms, nil
}
