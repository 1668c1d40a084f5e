package budget

import (
	"slices"
	"strconv"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/reject"
)

// check refuses an entry that breaks a rule of §7 after the entries
// before it; it changes nothing. The live ledger and Verify decide with
// it alike, so what one appends the other accepts.
func (s *State) check(e *entry) error {
	switch e.op {
	case opAdmit:
		return s.checkAdmit(e.tok)
	case opReserve:
		return s.checkReserve(e)
	case opPost, opRelease:
		return s.checkSettle(e)
	case opRevoke:
		return s.checkRevoke(e.tok)
	case opAmend:
		return s.checkAmend(e.tok)
	case opMint:
		return s.checkMint(e)
	case opCheckpoint:
		return s.checkCheckpoint(e.tok)
	}
	return reject.New(reject.Invalid, "op", "%q is not an op", clip(e.op))
}

func (s *State) admitted(id addr.Addr) bool {
	_, g := s.grants[id]
	_, p := s.policies[id]
	return g || p
}

func (s *State) checkAdmit(t *jcp.Token) error {
	if s.admitted(t.ID) {
		return reject.New(reject.Invalid, "token", "%s was admitted before", t.ID)
	}
	switch {
	case t.Policy != nil:
		return s.checkPolicy(t)
	case t.Grant != nil:
		return s.checkGrant(t)
	}
	return reject.New(reject.Invalid, "token", "a %s; the ledger admits grants and mint policies", t.Type)
}

// checkGrant: a root's issuer is trusted; a child follows its admitted
// parent (§4 steps 3–4, time excluded), through its admitted policy if
// it was minted, within the policy's max.
func (s *State) checkGrant(t *jcp.Token) error {
	g := t.Grant
	if g.Parent == nil {
		if !s.trust.Trusts(g.Iss) {
			return reject.New(reject.UntrustedRoot, "token.iss", "%s is not a trusted root key", g.Iss)
		}
		return nil
	}
	parent, ok := s.grants[*g.Parent]
	if !ok {
		return reject.New(reject.BrokenChain, "token.parent", "%s is not an admitted grant", g.Parent)
	}
	if g.Policy == nil {
		return jcp.Link(parent.tok, nil, t, "token.")
	}
	p, ok := s.policies[*g.Policy]
	if !ok {
		return reject.New(reject.BrokenChain, "token.policy", "%s is not an admitted mint policy", g.Policy)
	}
	if err := jcp.Link(parent.tok, p.tok, t, "token."); err != nil {
		return err
	}
	return p.checkMax()
}

// checkPolicy: the grant it holds is admitted, it is its audience's, and
// it is within it (§6).
func (s *State) checkPolicy(t *jcp.Token) error {
	mp := t.Policy
	held, ok := s.grants[mp.Grant]
	if !ok {
		return reject.New(reject.BrokenChain, "token.grant", "%s is not an admitted grant", mp.Grant)
	}
	if mp.Iss != held.tok.Grant.Aud {
		return reject.New(reject.WrongIssuer, "token.iss", "%s; only the grant's audience %s may make a mint policy of it", mp.Iss, held.tok.Grant.Aud)
	}
	return jcp.PolicyWithin(t, held.tok, "token.")
}

func (p *policy) checkMax() error {
	if max := p.tok.Policy.Max; p.children >= max {
		return reject.New(reject.RunsExhausted, p.tok.ID.String()+".max", "the policy has minted its %d children", max)
	}
	return nil
}

// checkMint: the child was minted under an admitted policy, neither
// revoked (nor the grant it holds), and follows the policy's grant
// through it (§6), on one of its events, within its max and its rate.
func (s *State) checkMint(e *entry) error {
	t := e.tok
	g := t.Grant
	if g.Policy == nil {
		return reject.New(reject.BrokenChain, "token.policy", "a minted grant names the policy it was minted under")
	}
	p, ok := s.policies[*g.Policy]
	if !ok {
		return reject.New(reject.BrokenChain, "token.policy", "%s is not an admitted mint policy", g.Policy)
	}
	if s.admitted(t.ID) {
		return reject.New(reject.Invalid, "token", "%s was admitted before", t.ID)
	}
	if p.isRevoked() {
		return reject.New(reject.Revoked, "token.policy", "the policy, or the grant it holds, is revoked")
	}
	if err := jcp.Link(p.held.tok, p.tok, t, "token."); err != nil {
		return err
	}
	mp := p.tok.Policy
	if !slices.Contains(mp.Events, e.event) {
		return reject.New(reject.Invalid, "event", "%q is not among the policy's events %v", clip(e.event), mp.Events)
	}
	if err := p.checkMax(); err != nil {
		return err
	}
	if n := p.mints.within(e.at, mp.Rate.Per); n >= mp.Rate.N {
		return reject.New(reject.RateExceeded, p.tok.ID.String()+".rate", "%d mints in the last %d s; the policy allows %d", n, mp.Rate.Per, mp.Rate.N)
	}
	return nil
}

// checkReserve: the rules of a reservation, in the order §7 lists them;
// each rule over the whole path (leaf first) before the next.
func (s *State) checkReserve(e *entry) error {
	if e.n != s.last+1 {
		return reject.New(reject.Invalid, "n", "reservation %d; the next is %d", e.n, s.last+1)
	}
	if err := checkUJ(e.uj, true); err != nil {
		return err
	}
	path, err := s.path(e.path)
	if err != nil {
		return err
	}
	for i, g := range path {
		if g.isRevoked() {
			return reject.New(reject.Revoked, pathAt(i), "%s, an ancestor, or the policy one was minted under is revoked", g.tok.ID)
		}
	}
	if _, ok := s.seen[e.inv]; ok {
		return reject.New(reject.Replay, "inv", "the invocation %s was reserved for before", e.inv)
	}
	classes := classesOf(e.uj)
	for _, g := range path {
		for _, c := range classes {
			if _, ok := g.terms.Ceilings[c]; !ok {
				return reject.New(reject.ClassNotGranted, g.tok.ID.String()+".ceilings."+string(c), "the grant gives no %s", c)
			}
		}
	}
	for _, g := range path {
		if err := g.checkCount(e.at); err != nil {
			return err
		}
	}
	for _, g := range path {
		for _, c := range classes {
			if err := g.checkCeiling(c, e.uj[c]); err != nil {
				return err
			}
		}
	}
	return nil
}

// path resolves a reservation's path: admitted grants, leaf first, each
// the child of the next, to a root.
func (s *State) path(ids []addr.Addr) ([]*grant, error) {
	if len(ids) == 0 {
		return nil, reject.New(reject.BrokenChain, "path", "no grant: a path goes from the leaf to the root")
	}
	out := make([]*grant, len(ids))
	for i, id := range ids {
		g, ok := s.grants[id]
		switch {
		case !ok:
			return nil, reject.New(reject.BrokenChain, pathAt(i), "%s is not an admitted grant", id)
		case i > 0 && out[i-1].parent != g:
			return nil, reject.New(reject.BrokenChain, pathAt(i), "%s is not the parent of %s", id, ids[i-1])
		}
		out[i] = g
	}
	if last := out[len(out)-1]; last.parent != nil {
		return nil, reject.New(reject.BrokenChain, pathAt(len(ids)-1), "%s is not a root: a path goes to the root", last.tok.ID)
	}
	return out, nil
}

func pathAt(i int) string { return "path[" + strconv.Itoa(i) + "]" }

// classesOf is uj's classes in canonical order.
func classesOf(uj map[device.Class]energy.Microjoules) []device.Class {
	out := make([]device.Class, 0, len(uj))
	for _, c := range device.Classes {
		if _, ok := uj[c]; ok {
			out = append(out, c)
		}
	}
	return out
}

// checkCount: the grant's runs and rate caveats (its effective ones),
// over its subtree, by at.
func (g *grant) checkCount(at int64) error {
	cv := g.terms.Caveats
	if cv.Runs != 0 && g.runs >= cv.Runs {
		return reject.New(reject.RunsExhausted, g.tok.ID.String()+".caveats.runs", "%d runs reserved; the grant allows %d", g.runs, cv.Runs)
	}
	if r := cv.Rate; r != nil {
		if n := g.times.within(at, r.Per); n >= r.N {
			return reject.New(reject.RateExceeded, g.tok.ID.String()+".caveats.rate", "%d runs in the last %d s; the grant allows %d", n, r.Per, r.N)
		}
	}
	return nil
}

// checkCeiling: reserved + spent + uj ≤ the effective ceiling.
func (g *grant) checkCeiling(c device.Class, uj energy.Microjoules) error {
	ceil := g.terms.Ceilings[c]
	r := c.Rank()
	if sat(sat(g.reserved[r], g.spent[r]), uj) > ceil {
		return reject.New(reject.OverCeiling, g.tok.ID.String()+".ceilings."+string(c),
			"%s reserved and %s spent of %s; %s more does not fit", g.reserved[r], g.spent[r], ceil, uj)
	}
	return nil
}

// checkSettle: a post or release names an open reservation.
func (s *State) checkSettle(e *entry) error {
	if _, ok := s.open[e.n]; !ok {
		what := "never reserved"
		if e.n >= 1 && e.n <= s.last {
			what = "posted or released before"
		}
		return reject.New(reject.DoubleSpend, "n", "reservation %d is not open: %s", e.n, what)
	}
	if e.op == opRelease {
		if e.why != WhyRefused && e.why != WhyFailed && e.why != WhyExpired {
			return reject.New(reject.Invalid, "why", "%q; a reservation is released as refused, failed or expired", clip(e.why))
		}
		return nil
	}
	return checkUJ(e.uj, false)
}

// checkRevoke: the revoked grant or mint policy is admitted, and the
// revoker issued it or one of its ancestors (a policy's: the policy, the
// grant it holds, and that grant's ancestors).
func (s *State) checkRevoke(t *jcp.Token) error {
	r := t.Revocation
	g, ok := s.grants[r.Grant]
	if p, isPolicy := s.policies[r.Grant]; isPolicy {
		if p.tok.Policy.Iss == r.Iss {
			return nil
		}
		g, ok = p.held, true
	}
	if !ok {
		return reject.New(reject.BrokenChain, "token.grant", "%s is not an admitted grant or mint policy", r.Grant)
	}
	for a := g; a != nil; a = a.parent {
		if a.tok.Grant.Iss == r.Iss {
			return nil
		}
	}
	return reject.New(reject.WrongIssuer, "token.iss", "%s issued neither %s nor anything above it", r.Iss, r.Grant)
}

// checkAmend: §8.
func (s *State) checkAmend(t *jcp.Token) error {
	a := t.Amendment
	g, ok := s.grants[a.Grant]
	if !ok {
		return reject.New(reject.BrokenChain, "token.grant", "%s is not an admitted grant", a.Grant)
	}
	gg := g.tok.Grant
	if a.Iss != gg.Iss {
		return reject.New(reject.AmendNotIssuer, "token.iss", "%s; only the grant's issuer %s amends it", a.Iss, gg.Iss)
	}
	if gg.Iss == gg.Aud {
		return reject.New(reject.AmendNotIssuer, "token.iss", "the grant's issuer is its audience, who never amends its own grant")
	}
	if a.Seq <= g.amended {
		return reject.New(reject.AmendStale, "token.seq", "%d; the grant's last amendment is %d", a.Seq, g.amended)
	}
	return jcp.Narrows(a.Terms(), g.terms, "token.", true)
}

// checkCheckpoint: the grant's audience's, in order.
func (s *State) checkCheckpoint(t *jcp.Token) error {
	c := t.Checkpoint
	g, ok := s.grants[c.Grant]
	if !ok {
		return reject.New(reject.BrokenChain, "token.grant", "%s is not an admitted grant", c.Grant)
	}
	if c.Iss != g.tok.Grant.Aud {
		return reject.New(reject.WrongAudience, "token.iss", "%s; the grant is for %s", c.Iss, g.tok.Grant.Aud)
	}
	if c.Seq <= g.checkpoint {
		return reject.New(reject.Invalid, "token.seq", "%d; the grant's last checkpoint is %d", c.Seq, g.checkpoint)
	}
	return nil
}
