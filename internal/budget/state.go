package budget

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// nClasses is how many device classes there are: a grant's sums are
// arrays indexed by a class's rank.
const nClasses = 8

// State is a ledger replayed: what every admitted grant and policy is,
// and every grant's effective terms, budget and revocation, and the
// open reservations. Verify returns one; a Ledger keeps one. Its methods
// do not lock: a State from Verify is the caller's alone.
type State struct {
	trust    key.Trust
	grants   map[addr.Addr]*grant
	policies map[addr.Addr]*policy
	roots    []*grant // in the order they were admitted
	open     map[uint64]*hold
	last     uint64 // the last reservation's number
	seen     map[addr.Addr]struct{}
	size     uint64
	head     addr.Addr
}

// grant is an admitted grant and what the ledger keeps of it.
type grant struct {
	tok        *jcp.Token
	parent     *grant
	via        *policy  // the policy it was minted under, if any
	children   []*grant // in the order they were admitted
	terms      jcp.Terms
	amended    uint64 // the last amendment's seq
	checkpoint uint64 // the last checkpoint's seq
	revoked    bool   // itself; an ancestor's (or its policy's) is its too
	reserved   [nClasses]energy.Microjoules
	spent      [nClasses]energy.Microjoules
	runs       uint64 // reservations on its subtree, not released refused
	times      stamps // their at
}

// policy is an admitted mint policy.
type policy struct {
	tok      *jcp.Token
	held     *grant
	revoked  bool   // it, and so every grant minted under it
	children uint64 // grants admitted or minted under it
	mints    stamps // the at of its mints
}

// hold is an open reservation.
type hold struct {
	n         uint64
	path      []*grant
	uj        map[device.Class]energy.Microjoules
	inv       addr.Addr
	at, until int64
}

func newState(trust key.Trust) *State {
	return &State{
		trust:    trust,
		grants:   map[addr.Addr]*grant{},
		policies: map[addr.Addr]*policy{},
		open:     map[uint64]*hold{},
		seen:     map[addr.Addr]struct{}{},
		head:     chain.Genesis(Domain),
	}
}

// step applies a checked entry and advances the head over its line.
func (s *State) step(e *entry, line []byte) {
	s.apply(e)
	s.size++
	s.head = chain.Step(s.head, line)
}

// apply makes a checked entry's change.
func (s *State) apply(e *entry) {
	switch e.op {
	case opAdmit, opMint:
		s.admit(e)
	case opReserve:
		s.reserve(e)
	case opPost, opRelease:
		s.settle(e)
	case opRevoke:
		id := e.tok.Revocation.Grant
		if g, ok := s.grants[id]; ok {
			g.revoked = true
		} else {
			s.policies[id].revoked = true
		}
	case opAmend:
		a := e.tok.Amendment
		g := s.grants[a.Grant]
		g.terms, g.amended = a.Terms(), a.Seq
	case opCheckpoint:
		c := e.tok.Checkpoint
		s.grants[c.Grant].checkpoint = c.Seq
	}
}

func (s *State) admit(e *entry) {
	t := e.tok
	if t.Policy != nil {
		s.policies[t.ID] = &policy{tok: t, held: s.grants[t.Policy.Grant]}
		return
	}
	g := &grant{tok: t, terms: t.Grant.Terms()}
	s.grants[t.ID] = g
	if t.Grant.Parent == nil {
		s.roots = append(s.roots, g)
		return
	}
	g.parent = s.grants[*t.Grant.Parent]
	g.parent.children = append(g.parent.children, g)
	if t.Grant.Policy != nil {
		p := s.policies[*t.Grant.Policy]
		g.via = p
		p.children++
		if e.op == opMint {
			p.mints.add(e.at)
		}
	}
}

func (s *State) reserve(e *entry) {
	h := &hold{n: e.n, uj: e.uj, inv: e.inv, at: e.at, until: e.until, path: make([]*grant, len(e.path))}
	for i, id := range e.path {
		g := s.grants[id]
		h.path[i] = g
		for c, v := range e.uj {
			g.reserved[c.Rank()] += v
		}
		g.runs++
		g.times.add(e.at)
	}
	s.last = e.n
	s.seen[e.inv] = struct{}{}
	s.open[e.n] = h
}

// settle closes a reservation: posted (its run's spending counts) or
// released (a refused run's does not count as a run either).
func (s *State) settle(e *entry) {
	h := s.open[e.n]
	delete(s.open, e.n)
	for _, g := range h.path {
		for c, v := range h.uj {
			g.reserved[c.Rank()] -= v
		}
		for c, v := range e.uj {
			g.spent[c.Rank()] = sat(g.spent[c.Rank()], v)
		}
		if e.why == WhyRefused {
			g.runs--
			g.times.remove(h.at)
		}
	}
}

// sat is a+b, or the most a Microjoules holds.
func sat(a, b energy.Microjoules) energy.Microjoules {
	s, c := bits.Add64(uint64(a), uint64(b), 0)
	if c != 0 {
		return math.MaxUint64
	}
	return energy.Microjoules(s)
}

// stamps are times in Unix ns, ascending (a clock may step back: each is
// put in its place).
type stamps []int64

func (s *stamps) add(t int64) {
	i := sort.Search(len(*s), func(i int) bool { return (*s)[i] > t })
	*s = slices.Insert(*s, i, t)
}

func (s *stamps) remove(t int64) {
	if i, ok := slices.BinarySearch(*s, t); ok {
		*s = slices.Delete(*s, i, i+1)
	}
}

// within is how many stamps are in the per seconds up to at: in
// (at − per·10⁹, at].
func (s stamps) within(at int64, per uint64) uint64 {
	upTo := func(t int64) int { return sort.Search(len(s), func(i int) bool { return s[i] > t }) }
	from := int64(math.MinInt64)
	if per <= math.MaxInt64/uint64(time.Second) {
		from = at - int64(per)*int64(time.Second)
	}
	return uint64(upTo(at) - upTo(from))
}

// isRevoked says whether g, an ancestor, or a policy one of them was
// minted under is revoked.
func (g *grant) isRevoked() bool {
	for ; g != nil; g = g.parent {
		if g.revoked || g.via != nil && g.via.revoked {
			return true
		}
	}
	return false
}

// isRevoked says whether p or the grant it holds is revoked.
func (p *policy) isRevoked() bool { return p.revoked || p.held.isRevoked() }

// Budget is one grant's budget after the ledger (§7).
type Budget struct {
	Grant   addr.Addr
	Parent  *addr.Addr // nil for a root
	Classes []ClassBudget
	Runs    uint64 // reservations on its subtree, not released refused
	Revoked bool   // it or an ancestor
	Amended uint64 // the last amendment's seq; 0 if none
}

// ClassBudget is a grant's budget of one class. Remaining is Ceiling −
// Reserved − Spent, floored at 0.
type ClassBudget struct {
	Class                               device.Class
	Ceiling, Reserved, Spent, Remaining energy.Microjoules
}

// Pending is an open reservation: reserved, not yet posted or released.
type Pending struct {
	N uint64
	Reservation
	At time.Time
}

// Head is the number of entries and the head after them.
func (s *State) Head() (size uint64, head addr.Addr) { return s.size, s.head }

// Token is an admitted grant or mint policy.
func (s *State) Token(id addr.Addr) (*jcp.Token, bool) {
	if g, ok := s.grants[id]; ok {
		return g.tok, true
	}
	if p, ok := s.policies[id]; ok {
		return p.tok, true
	}
	return nil, false
}

// Effective is an admitted grant's terms after its amendments. They are
// shared: the caller does not change them.
func (s *State) Effective(id addr.Addr) (jcp.Terms, bool) {
	g, ok := s.grants[id]
	if !ok {
		return jcp.Terms{}, false
	}
	return g.terms, true
}

// Revoked says whether the grant, one of its ancestors, or a policy one
// of them was minted under is revoked; for a mint policy, whether it or
// the grant it holds is.
func (s *State) Revoked(id addr.Addr) bool {
	if g, ok := s.grants[id]; ok {
		return g.isRevoked()
	}
	p, ok := s.policies[id]
	return ok && p.isRevoked()
}

// Budget is an admitted grant's budget.
func (s *State) Budget(id addr.Addr) (Budget, bool) {
	g, ok := s.grants[id]
	if !ok {
		return Budget{}, false
	}
	return g.budget(), true
}

func (g *grant) budget() Budget {
	b := Budget{Grant: g.tok.ID, Parent: g.tok.Grant.Parent, Runs: g.runs, Revoked: g.isRevoked(), Amended: g.amended}
	for i, c := range device.Classes {
		ceil, has := g.terms.Ceilings[c]
		res, sp := g.reserved[i], g.spent[i]
		if !has && res == 0 && sp == 0 {
			continue
		}
		cb := ClassBudget{Class: c, Ceiling: ceil, Reserved: res, Spent: sp}
		if used := sat(res, sp); used < ceil {
			cb.Remaining = ceil - used
		}
		b.Classes = append(b.Classes, cb)
	}
	return b
}

// Tree is every admitted grant's budget, each parent before its
// children: depth first, in the order they were admitted.
func (s *State) Tree() []Budget {
	out := make([]Budget, 0, len(s.grants))
	var walk func(*grant)
	walk = func(g *grant) {
		out = append(out, g.budget())
		for _, c := range g.children {
			walk(c)
		}
	}
	for _, r := range s.roots {
		walk(r)
	}
	return out
}

// Outstanding is the open reservations, by number.
func (s *State) Outstanding() []Pending {
	out := make([]Pending, 0, len(s.open))
	for _, h := range s.open {
		p := Pending{N: h.n, At: time.Unix(0, h.at), Reservation: Reservation{
			UJ: h.uj, Invocation: h.inv, Until: time.Unix(0, h.until), Path: make([]addr.Addr, len(h.path)),
		}}
		for i, g := range h.path {
			p.Path[i] = g.tok.ID
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pending) int {
		if a.N < b.N {
			return -1
		}
		return 1
	})
	return out
}
