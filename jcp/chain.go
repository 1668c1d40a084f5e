package jcp

import (
	"fmt"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Chain is a verified chain: its grants, root first, and the policy each
// minted grant was minted under (nil where none).
type Chain struct {
	Grants   []*Token
	Policies []*Token
}

// Leaf is the chain's last grant: the one presented.
func (c *Chain) Leaf() *Token { return c.Grants[len(c.Grants)-1] }

// IDs are the chain's grant ids, root first.
func (c *Chain) IDs() []addr.Addr {
	ids := make([]addr.Addr, len(c.Grants))
	for i, g := range c.Grants {
		ids[i] = g.ID
	}
	return ids
}

// Path is the chain's grant ids, leaf first: the ledger's order.
func (c *Chain) Path() []addr.Addr {
	ids := c.IDs()
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
	}
	return ids
}

// DecodeChain reads a chain's wire form: a CBOR array of envelopes.
func DecodeChain(b []byte) ([][]byte, error) {
	var els [][]byte
	if err := cbor.Unmarshal(b, &els); err != nil {
		return nil, reject.New(reject.Malformed, "chain", "a chain is a CBOR array of COSE_Sign1 byte strings: %v", err)
	}
	return els, nil
}

// EncodeChain is a chain's wire form.
func EncodeChain(els [][]byte) []byte {
	b, _ := cbor.Marshal(els)
	return b
}

// Verify checks a chain (§4) offline: from the trusted root keys alone, at
// time now. Revocations, amendments and budgets are the ledger's.
func Verify(els [][]byte, roots key.Trust, now time.Time) (*Chain, error) {
	if len(els) == 0 || len(els) > MaxDepth {
		return nil, reject.New(reject.ChainDepth, "chain", "%d elements; a chain has 1 to %d", len(els), MaxDepth)
	}
	c := &Chain{}
	var policy *Token
	for i, b := range els {
		where := fmt.Sprintf("chain[%d]", i)
		t, err := Open(b)
		if err != nil {
			return nil, reject.In(where, err)
		}
		if err := timely(t, now, where); err != nil {
			return nil, err
		}
		switch {
		case t.Policy != nil:
			if policy != nil || i == 0 {
				return nil, reject.New(reject.Invalid, where, "a mint policy stands just before the grant minted under it, after the grant it holds")
			}
			policy = t
			continue
		case t.Grant == nil:
			return nil, reject.New(reject.Invalid, where, "a %s in a chain of grants", t.Type)
		}
		if i == 0 {
			if t.Grant.Parent != nil {
				return nil, reject.New(reject.BrokenChain, where+".parent", "the first grant of a chain is a root, with no parent")
			}
			if !roots.Trusts(t.Grant.Iss) {
				return nil, reject.New(reject.UntrustedRoot, where+".iss", "%s is not a trusted root key", t.Grant.Iss)
			}
		} else if err := Link(c.Leaf(), policy, t, where+"."); err != nil {
			return nil, err
		}
		c.Grants = append(c.Grants, t)
		c.Policies = append(c.Policies, policy)
		policy = nil
	}
	if policy != nil {
		return nil, reject.New(reject.BrokenChain, "chain", "ends with a mint policy; a chain ends with the grant presented")
	}
	return c, nil
}

// Timely checks every grant's and policy's times at now (§4 step 2): a
// chain verified before, checked again at another time.
func (c *Chain) Timely(now time.Time) error {
	for i, g := range c.Grants {
		if err := timely(g, now, fmt.Sprintf("chain.grants[%d]", i)); err != nil {
			return err
		}
		if p := c.Policies[i]; p != nil {
			if err := timely(p, now, fmt.Sprintf("chain.grants[%d].policy", i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// timely checks a token's times at now (§4 step 2).
func timely(t *Token, now time.Time, where string) error {
	var iat, exp uint64
	switch {
	case t.Grant != nil:
		iat, exp = t.Grant.Iat, t.Grant.Exp
	case t.Policy != nil:
		iat, exp = t.Policy.Iat, t.Policy.Exp
	default:
		return nil
	}
	s := unix(now)
	if exp <= s {
		return reject.New(reject.Expired, where+".exp", "expired at %s", time.Unix(int64(exp), 0).UTC().Format(time.RFC3339))
	}
	if iat > s+uint64(Skew/time.Second) {
		return reject.New(reject.NotYet, where+".iat", "issued at %s, in the future", time.Unix(int64(iat), 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func unix(t time.Time) uint64 {
	if s := t.Unix(); s > 0 {
		return uint64(s)
	}
	return 0
}

// Link checks that child follows parent (§4 step 5), through policy
// when child was minted under one (nil otherwise). Time is not checked.
func Link(parent, policy, child *Token, where string) error {
	g, p := child.Grant, parent.Grant
	if g == nil || p == nil {
		return reject.New(reject.Invalid, where, "a link is between two grants")
	}
	if g.Parent == nil || *g.Parent != parent.ID {
		return reject.New(reject.BrokenChain, where+"parent", "does not name the grant before it (%s)", parent.ID)
	}
	if g.Policy == nil {
		if policy != nil {
			return reject.New(reject.BrokenChain, where+"policy", "a grant after a mint policy names it")
		}
		if g.Iss != p.Aud {
			return reject.New(reject.WrongIssuer, where+"iss", "%s; only the parent's audience %s may delegate it", g.Iss, p.Aud)
		}
		return delegates(g, p, where)
	}
	if policy == nil || *g.Policy != policy.ID {
		return reject.New(reject.BrokenChain, where+"policy", "names a mint policy that does not stand just before it")
	}
	mp := policy.Policy
	if mp.Grant != parent.ID {
		return reject.New(reject.BrokenChain, where+"policy.grant", "the policy holds another grant")
	}
	if mp.Iss != p.Aud {
		return reject.New(reject.WrongIssuer, where+"policy.iss", "%s; only the parent's audience %s may make a mint policy of it", mp.Iss, p.Aud)
	}
	if err := PolicyWithin(policy, parent, where+"policy."); err != nil {
		return err
	}
	if g.Iss != mp.Minter {
		return reject.New(reject.WrongIssuer, where+"iss", "%s; the policy's minter is %s", g.Iss, mp.Minter)
	}
	if g.Aud != mp.To {
		return reject.New(reject.WrongAudience, where+"aud", "%s; the policy mints for %s", g.Aud, mp.To)
	}
	if err := Minted(g, mp, where); err != nil {
		return err
	}
	return delegates(g, p, where)
}

// PolicyWithin checks a mint policy against the grant it holds (§6): its
// expiry and its template within the grant.
func PolicyWithin(policy, held *Token, where string) error {
	mp, g := policy.Policy, held.Grant
	if mp.Exp > g.Exp {
		return reject.New(reject.WidenExpiry, where+"exp", "%d is after the held grant's %d", mp.Exp, g.Exp)
	}
	tm := mp.Template
	if g.Depth == 0 {
		return reject.New(reject.DepthExhausted, where+"template.depth", "the held grant may not be delegated (depth 0)")
	}
	if tm.Depth > g.Depth-1 {
		return reject.New(reject.WidenDepth, where+"template.depth", "%d; the held grant allows at most %d below it", tm.Depth, g.Depth-1)
	}
	return Narrows(Terms{Exp: mp.Exp, Images: tm.Images, Ceilings: tm.Ceilings, Caveats: tm.Caveats}, g.Terms(), where+"template.", false)
}

// Minted checks a minted child against its policy's template (§6).
func Minted(g *Grant, mp *Policy, where string) error {
	tm := mp.Template
	limit := min(g.Iat+tm.TTL, mp.Exp)
	if g.Exp > limit {
		return reject.New(reject.WidenExpiry, where+"exp", "%d is after what the policy allows (%d: iat + ttl, or the policy's expiry)", g.Exp, limit)
	}
	if g.Depth > tm.Depth {
		return reject.New(reject.WidenDepth, where+"depth", "%d; the template allows %d", g.Depth, tm.Depth)
	}
	return Narrows(g.Terms(), Terms{Exp: g.Exp, Images: tm.Images, Ceilings: tm.Ceilings, Caveats: tm.Caveats}, where, false)
}
