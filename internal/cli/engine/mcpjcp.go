package engine

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/cli"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/mcp"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// mcpAgent is the JCP principal of `sandbox mcp --jcp FILE --as NAME`
// (mcp.Principal): the chain, and the key of its last grant's audience,
// read from the state directory as `sandbox run --jcp` reads them. It
// signs invocations, children of its grant and checkpoints; nothing
// else (no amendment, no revocation).
type mcpAgent struct {
	p   *presenter
	now func() time.Time
}

func newMCPAgent(p *presenter) *mcpAgent { return &mcpAgent{p: p, now: time.Now} }

func (a *mcpAgent) Chain() [][]byte { return slices.Clone(a.p.Elements) }

func (a *mcpAgent) Present() (*client.JCP, error) { return a.p.Present() }

// Delegate signs a child of the chain's last grant: its terms narrowed
// by d, the rest the grant's. It does not check that the child narrows:
// the service does, with the refusal's code.
func (a *mcpAgent) Delegate(d mcp.DelegateIn) ([][]byte, error) {
	leaf := a.p.Leaf
	aud, err := key.ParsePublic(d.To)
	if err != nil {
		return nil, errs.Usage{Err: fmt.Errorf("\"to\": %w", err)}
	}
	now := a.now()
	t, err := narrowed(leaf.Grant.Terms(), d, now)
	if err != nil {
		return nil, err
	}
	depth := uint64(0)
	if leaf.Grant.Depth > 0 {
		depth = leaf.Grant.Depth - 1
	}
	if d.Depth != nil {
		depth = *d.Depth
	}
	tok, err := jcp.Seal(&jcp.Grant{Aud: aud, Parent: &leaf.ID, Iat: uint64(now.Unix()), Exp: t.Exp, Depth: depth,
		Images: t.Images, Ceilings: t.Ceilings, Caveats: t.Caveats}, a.p.Key)
	if err != nil {
		return nil, errs.Usage{Err: err}
	}
	return append(a.Chain(), tok.Bytes), nil
}

// narrowed is base with what d gives in its place.
func narrowed(base jcp.Terms, d mcp.DelegateIn, now time.Time) (jcp.Terms, error) {
	t := base
	t.Ceilings = maps.Clone(base.Ceilings)
	if len(d.Images) > 0 {
		t.Images = nil
		for _, s := range d.Images {
			im, err := addr.Parse(s)
			if err != nil {
				return t, errs.Usage{Err: fmt.Errorf("\"images\": %w", err)}
			}
			t.Images = append(t.Images, im)
		}
		slices.SortFunc(t.Images, func(a, b addr.Addr) int { return bytes.Compare(a[:], b[:]) })
		t.Images = slices.Compact(t.Images)
	}
	if len(d.Ceilings) > 0 {
		t.Ceilings = map[device.Class]energy.Microjoules{}
		for cl, en := range d.Ceilings {
			c, err := device.ParseClass(cl)
			if err != nil {
				return t, errs.Usage{Err: fmt.Errorf("\"ceilings\": %w", err)}
			}
			e, err := energy.Parse(en)
			if err != nil || e == 0 {
				return t, errs.Usage{Err: fmt.Errorf("\"ceilings\": %s: %q: want a positive energy, e.g. 50J, 2kJ", cl, en)}
			}
			t.Ceilings[c] = e
		}
	}
	if d.Expires != "" {
		dur, err := time.ParseDuration(d.Expires)
		if err != nil || dur <= 0 {
			return t, errs.Usage{Err: fmt.Errorf("\"expires\": %q: want a duration from now, e.g. 30m", d.Expires)}
		}
		t.Exp = uint64(now.Add(dur).Unix())
	}
	if c := d.Caveats; c != nil {
		set := func(s []string) []string {
			s = slices.Clone(s)
			sort.Strings(s)
			return slices.Compact(s)
		}
		if c.Models != nil {
			t.Caveats.Models = set(c.Models)
		}
		if c.Tiers != nil {
			t.Caveats.Tiers = set(c.Tiers)
		}
		if c.Hosts != nil {
			t.Caveats.Hosts = set(c.Hosts)
		}
		if c.Paths != nil {
			t.Caveats.Paths = set(c.Paths)
		}
		if c.Runs != 0 {
			t.Caveats.Runs = c.Runs
		}
		if c.Rate != nil {
			t.Caveats.Rate = &jcp.Rate{N: c.Rate.N, Per: c.Rate.Per}
		}
	}
	return t, nil
}

// Checkpoint signs a checkpoint of the chain's last grant.
func (a *mcpAgent) Checkpoint(run, state string, seq uint64) ([]byte, error) {
	r, err := addr.Parse(run)
	if err != nil {
		return nil, errs.Usage{Err: fmt.Errorf("\"run\": %w", err)}
	}
	cp := &jcp.Checkpoint{Grant: a.p.Leaf.ID, Run: r, Seq: seq, Iat: uint64(a.now().Unix())}
	if state != "" {
		s, err := addr.Parse(state)
		if err != nil {
			return nil, errs.Usage{Err: fmt.Errorf("\"state\": %w", err)}
		}
		cp.State = &s
	}
	tok, err := jcp.Seal(cp, a.p.Key)
	if err != nil {
		return nil, errs.Usage{Err: err}
	}
	return tok.Bytes, nil
}

// mcpPrincipal is the agent of --jcp and --as: nil without them.
func mcpPrincipal(g *cli.Globals, file, as string) (mcp.Principal, error) {
	p, err := newPresenter(g, file, as)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, nil
	}
	if p.Leaf.Grant.Exp <= uint64(time.Now().Unix()) {
		return nil, errs.Usage{Err: errors.New("--jcp " + file + ": its last grant has expired")}
	}
	return newMCPAgent(p), nil
}
