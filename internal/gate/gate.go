package gate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
)

// Gate decides runs presented with a JCP chain.
type Gate struct {
	Ledger *budget.Ledger
	Key    key.Private // the host's: it signs every decision
	Roots  key.Trust   // the root keys a chain may start from
	// Denied is where denied decisions are kept (STATE/jcp/decisions).
	Denied string
	Clock  func() time.Time // nil: time.Now

	chainsMu sync.Mutex               // guards Roots once deciding, and:
	chains   map[addr.Addr]*jcp.Chain // verified, by their elements' addresses
	gen      uint64                   // how many times the roots were replaced
}

// Presentation is what a run is presented with: the chain, root first,
// and the invocation its last grant's audience signed.
type Presentation struct {
	Chain      [][]byte
	Invocation []byte
}

// Decided is an allowed run's decision and its reservation.
type Decided struct {
	Decision    *jcp.Token
	Reservation uint64
	Chain       *jcp.Chain
	Reserve     map[device.Class]energy.Microjoules
}

// DeniedError is a refusal: the sealed decision that says so, and why.
type DeniedError struct {
	Decision addr.Addr // kept under Gate.Denied
	Err      error     // a *reject.Error
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("JCP: refused (decision %s): %v", e.Decision, e.Err)
}

// Unwrap is the refusal.
func (e *DeniedError) Unwrap() error { return e.Err }

// Category is errs' category of a denial: denied (exit 6, HTTP 403).
func (e *DeniedError) Category() string { return "denied" }

func (g *Gate) now() time.Time {
	if g.Clock != nil {
		return g.Clock()
	}
	return time.Now()
}

// Decide decides one run before anything runs (§5): a refusal is a
// *DeniedError, with its decision sealed and kept; an allowed run has its
// budget reserved until until, and must be Settled or Released.
func (g *Gate) Decide(p Presentation, a jcp.Ask, until time.Time) (*Decided, error) {
	d := &jcp.Decision{Image: a.Image, Tier: a.Tier.String(), Chain: []addr.Addr{}}
	c, inv, err := g.check(p, a, d)
	if err != nil {
		return nil, g.deny(d, err)
	}
	n, err := g.Ledger.Reserve(budget.Reservation{Path: c.Path(), UJ: a.Budgets, Invocation: inv.ID, Until: until})
	if err != nil {
		if isRefusal(err) {
			return nil, g.deny(d, err)
		}
		return nil, err
	}
	d.Allow, d.Reserve, d.Reservation = true, a.Budgets, n
	d.At = uint64(g.now().UnixNano())
	tok, err := jcp.Seal(d, g.Key)
	if err != nil {
		// Reserved but not decided: void the reservation.
		return nil, errors.Join(err, g.Ledger.Release(n, "failed"))
	}
	return &Decided{Decision: tok, Reservation: n, Chain: c, Reserve: a.Budgets}, nil
}

// check verifies the chain and the invocation and admits the ask at every
// grant (§4, §5 steps 1–5), filling d's chain and invocation as it learns
// them, and admits the chain's tokens to the ledger.
func (g *Gate) check(p Presentation, a jcp.Ask, d *jcp.Decision) (*jcp.Chain, *jcp.Token, error) {
	now := g.now()
	c, err := g.verify(p.Chain, now)
	if err != nil {
		return nil, nil, err
	}
	d.Chain = c.IDs()
	inv, err := jcp.Open(p.Invocation)
	if err != nil {
		return nil, nil, reject.In("invocation", err)
	}
	d.Invocation = &inv.ID
	if err := jcp.Present(c, inv, now); err != nil {
		return nil, nil, err
	}
	if im := inv.Invocation.Image; im != nil && *im != a.Image {
		return nil, nil, reject.New(reject.ImageNotGranted, "invocation.image", "the invocation is for %s, the run runs %s", *im, a.Image)
	}
	a.Model = inv.Invocation.Model
	var admit []*jcp.Token
	for i, t := range c.Grants {
		if c.Policies[i] != nil {
			admit = append(admit, c.Policies[i])
		}
		admit = append(admit, t)
	}
	if err := g.Ledger.Admit(admit...); err != nil {
		return nil, nil, err
	}
	for i, t := range c.Grants {
		if g.Ledger.Revoked(t.ID) {
			return nil, nil, reject.New(reject.Revoked, fmt.Sprintf("chain[%d]", i), "grant %s (or one of its ancestors) is revoked", t.ID)
		}
		terms, ok := g.Ledger.Effective(t.ID)
		if !ok {
			terms = t.Grant.Terms()
		}
		if terms.Exp <= uint64(now.Unix()) {
			return nil, nil, reject.New(reject.Expired, fmt.Sprintf("chain[%d].exp", i), "expired (an amendment brought its expiry forward)")
		}
		if err := jcp.Admit(terms, a, t.ID.String()+"."); err != nil {
			return nil, nil, err
		}
	}
	return c, inv, nil
}

// verify is jcp.Verify, remembering chains that verified (by the
// addresses of their elements, under this gate's roots): what the bytes
// say is checked once, the times at every decision.
func (g *Gate) verify(els [][]byte, now time.Time) (*jcp.Chain, error) {
	h := addr.NewHasher()
	for _, e := range els {
		a := addr.Of(e)
		h.Write(a[:])
	}
	k := h.Sum()
	g.chainsMu.Lock()
	c, ok := g.chains[k]
	gen := g.gen
	g.chainsMu.Unlock()
	if ok {
		return c, c.Timely(now)
	}
	c, err := jcp.Verify(els, g.RootKeys(), now)
	if err != nil {
		return nil, err
	}
	g.chainsMu.Lock()
	if g.chains == nil || len(g.chains) >= maxChains {
		g.chains = map[addr.Addr]*jcp.Chain{}
	}
	if g.gen == gen { // not verified under roots since replaced
		g.chains[k] = c
	}
	g.chainsMu.Unlock()
	return c, nil
}

// RootKeys are the roots a chain may start from now.
func (g *Gate) RootKeys() key.Trust {
	g.chainsMu.Lock()
	defer g.chainsMu.Unlock()
	return g.Roots
}

// SetRoots replaces the roots, for the gate and its ledger: every chain
// is verified again at its next decision.
func (g *Gate) SetRoots(t key.Trust) {
	g.chainsMu.Lock()
	g.Roots, g.chains = t, nil
	g.gen++
	g.chainsMu.Unlock()
	g.Ledger.SetRoots(t)
}

// maxChains bounds the chains a gate remembers.
const maxChains = 4096

func isRefusal(err error) bool {
	var re *reject.Error
	return errors.As(err, &re)
}

// deny seals a refusal and keeps it; what it returns is the refusal.
func (g *Gate) deny(d *jcp.Decision, why error) error {
	if !isRefusal(why) {
		return why // the host failed, nobody was refused
	}
	var re *reject.Error
	errors.As(why, &re)
	d.Allow, d.Code, d.Where, d.Detail = false, string(re.Code), re.Where, re.Detail
	if d.Code == "" {
		d.Code = string(reject.Invalid)
	}
	d.At = uint64(g.now().UnixNano())
	tok, err := jcp.Seal(d, g.Key)
	if err != nil {
		return errors.Join(why, err)
	}
	if g.Denied != "" {
		if err := os.MkdirAll(g.Denied, 0o700); err != nil {
			return errors.Join(why, err)
		}
		if err := safefile.Write(filepath.Join(g.Denied, tok.ID.Hex()+".cose"), tok.Bytes, 0o600); err != nil {
			return errors.Join(why, err)
		}
	}
	return &DeniedError{Decision: tok.ID, Err: why}
}

// Settle posts what a sealed run spent (its receipt's measured +
// estimated µJ per class) against its reservation.
func (g *Gate) Settle(n uint64, r *receipt.Receipt, run addr.Addr) error {
	uj := map[device.Class]energy.Microjoules{}
	for _, dv := range r.Devices {
		t, err := energy.Add(dv.Measured, dv.Estimated)
		if err != nil {
			return err
		}
		uj[dv.Class] = t
	}
	return g.Ledger.Post(n, uj, run)
}

// Release voids a reservation whose run was not sealed.
func (g *Gate) Release(n uint64, why string) error { return g.Ledger.Release(n, why) }

// Allowance is what reservation n's run may spend of class c now: its
// reservation, less what amendments since took away at any grant of its
// chain (a tightened ceiling leaves the others' reservations and what was
// spent first). A run is stopped when its figure reaches it.
func (g *Gate) Allowance(d *Decided, c device.Class) energy.Microjoules {
	mine := d.Reserve[c]
	allow := mine
	for _, id := range d.Chain.Path() {
		b, ok := g.Ledger.Budget(id)
		if !ok {
			continue
		}
		for _, cb := range b.Classes {
			if cb.Class != c {
				continue
			}
			others := cb.Reserved - min(cb.Reserved, mine) + cb.Spent
			left := cb.Ceiling - min(cb.Ceiling, others)
			allow = min(allow, left)
		}
	}
	return allow
}

// Finder finds the sealed run of reservation n, made after since: its
// receipt and its attestation's address (ok false: none was sealed).
type Finder func(n uint64, since time.Time) (r *receipt.Receipt, run addr.Addr, ok bool, err error)

// Recover settles the reservations a killed host left open (§5): one
// whose run was sealed is posted from its receipt; one whose run was not
// is released as expired once its until has passed, and kept till then.
func (g *Gate) Recover(find Finder) (posted, expired int, err error) {
	now := g.now()
	for _, o := range g.Ledger.Outstanding() {
		r, run, ok, err := find(o.N, o.At)
		if err != nil {
			return posted, expired, err
		}
		switch {
		case ok:
			if err := g.Settle(o.N, r, run); err != nil {
				return posted, expired, err
			}
			posted++
		case now.After(o.Until):
			if err := g.Release(o.N, "expired"); err != nil {
				return posted, expired, err
			}
			expired++
		}
	}
	return posted, expired, nil
}

// Minted is a child the gate minted under a standing grant: its whole
// chain, root first (the held grant's ancestors, the policy, the child).
type Minted struct {
	Elements [][]byte
	Child    *jcp.Token
}

// Leaf is the minted child.
func (m Minted) Leaf() *jcp.Token { return m.Child }

// NotMinted is a policy that names an event and minted nothing for it.
type NotMinted struct {
	Policy addr.Addr
	Err    error
}

// Event mints, under every admitted mint policy that names event and
// whose minter is this host's key, one child of the held grant (§6):
// the template's terms, for the policy's audience, living the template's
// ttl (never past the policy or the held grant). Each mint is a ledger
// entry, refused past the policy's max or rate.
func (g *Gate) Event(event string, now time.Time) ([]Minted, []NotMinted) {
	var minted []Minted
	var refused []NotMinted
	for _, p := range g.Ledger.Policies() {
		mp := p.Policy
		if !slices.Contains(mp.Events, event) || mp.Minter != g.Key.Public() {
			continue
		}
		m, err := g.mint(p, event, now)
		if err != nil {
			refused = append(refused, NotMinted{Policy: p.ID, Err: err})
			continue
		}
		minted = append(minted, m)
	}
	return minted, refused
}

func (g *Gate) mint(p *jcp.Token, event string, now time.Time) (Minted, error) {
	mp := p.Policy
	if g.Ledger.Revoked(mp.Grant) {
		return Minted{}, reject.New(reject.Revoked, "policy.grant", "the held grant %s is revoked", mp.Grant)
	}
	held, ok := g.Ledger.Effective(mp.Grant)
	if !ok {
		return Minted{}, reject.New(reject.BrokenChain, "policy.grant", "the held grant %s was not admitted", mp.Grant)
	}
	s := uint64(now.Unix())
	exp := min(s+mp.Template.TTL, mp.Exp, held.Exp)
	if exp <= s {
		return Minted{}, reject.New(reject.Expired, "policy", "the policy or its held grant has expired")
	}
	tm := mp.Template
	pid, parent := p.ID, mp.Grant
	child := &jcp.Grant{Aud: mp.To, Parent: &parent, Policy: &pid, Iat: s, Exp: exp, Depth: tm.Depth,
		Images: tm.Images, Ceilings: tm.Ceilings, Caveats: tm.Caveats}
	tok, err := jcp.Seal(child, g.Key)
	if err != nil {
		return Minted{}, err
	}
	if err := g.Ledger.Mint(tok, event); err != nil {
		return Minted{}, err
	}
	els, err := g.ChainOf(mp.Grant)
	if err != nil {
		return Minted{}, err
	}
	return Minted{Elements: append(els, p.Bytes, tok.Bytes), Child: tok}, nil
}

// ChainOf is the chain of an admitted grant, root first, with the policy
// of every minted grant before it.
func (g *Gate) ChainOf(id addr.Addr) ([][]byte, error) {
	var rev [][]byte
	for n := 0; ; n++ {
		if n > jcp.MaxDepth {
			return nil, reject.New(reject.ChainDepth, "chain", "more than %d grants above %s", jcp.MaxDepth, id)
		}
		t, ok := g.Ledger.Token(id)
		if !ok || t.Grant == nil {
			return nil, reject.New(reject.BrokenChain, "chain", "grant %s was not admitted", id)
		}
		rev = append(rev, t.Bytes)
		if t.Grant.Policy != nil {
			p, ok := g.Ledger.Token(*t.Grant.Policy)
			if !ok {
				return nil, reject.New(reject.BrokenChain, "chain", "policy %s was not admitted", *t.Grant.Policy)
			}
			rev = append(rev, p.Bytes)
		}
		if t.Grant.Parent == nil {
			break
		}
		id = *t.Grant.Parent
	}
	slices.Reverse(rev)
	return rev, nil
}

// Tick mints under every standing grant with a schedule (every:SECONDS)
// whose period turned between prev and now: one child per policy and
// period boundary crossed (at most one per tick, however long it was).
func (g *Gate) Tick(prev, now time.Time) ([]Minted, []NotMinted) {
	var minted []Minted
	var refused []NotMinted
	for _, p := range g.Ledger.Policies() {
		if p.Policy.Minter != g.Key.Public() {
			continue
		}
		for _, e := range p.Policy.Events {
			s, ok := strings.CutPrefix(e, "every:")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 || prev.Unix()/n == now.Unix()/n {
				continue
			}
			m, err := g.mint(p, e, now)
			if err != nil {
				refused = append(refused, NotMinted{Policy: p.ID, Err: err})
				continue
			}
			minted = append(minted, m)
		}
	}
	return minted, refused
}
