package jcp

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
)

// Version is the payload version this package writes and reads.
const Version = 1

// The content types of JCP objects (docs/spec/jcp.md §2).
const (
	TypeGrant      = "application/jcp-grant+cbor"
	TypePolicy     = "application/jcp-mint-policy+cbor"
	TypeInvocation = "application/jcp-invocation+cbor"
	TypeAmendment  = "application/jcp-amendment+cbor"
	TypeRevocation = "application/jcp-revocation+cbor"
	TypeCheckpoint = "application/jcp-checkpoint+cbor"
	TypeDecision   = "application/jcp-decision+cbor"
)

// Bounds of a token (§3, §4).
const (
	MaxDepth   = 64  // a grant's depth, and a chain's elements
	MaxImages  = 256 // images of one grant
	MaxClasses = 8   // ceilings of one grant
	MaxSet     = 256 // members of a caveat's set
	// Skew is how far in the future an iat may be, and how far from now
	// an invocation may be, either way.
	Skew = 300 * time.Second
)

// Rate is at most N in any Per seconds.
type Rate struct {
	N   uint64 `cbor:"n"`
	Per uint64 `cbor:"per"`
}

// Caveats are the closed set of §3.1; a nil or zero member restricts
// nothing.
type Caveats struct {
	Models []string `cbor:"models,omitempty"` // ModelIn
	Tiers  []string `cbor:"tiers,omitempty"`
	Hosts  []string `cbor:"hosts,omitempty"`
	Paths  []string `cbor:"paths,omitempty"`
	Runs   uint64   `cbor:"runs,omitempty"`
	Rate   *Rate    `cbor:"rate,omitempty"`
}

// Terms are what attenuation narrows and an amendment replaces.
type Terms struct {
	Exp      uint64                              `cbor:"exp"`
	Images   []addr.Addr                         `cbor:"images"`
	Ceilings map[device.Class]energy.Microjoules `cbor:"ceilings"`
	Caveats  Caveats                             `cbor:"caveats"`
}

// Grant is a grant's payload (§3).
type Grant struct {
	V        uint64                              `cbor:"v"`
	Iss      key.Public                          `cbor:"iss"`
	Aud      key.Public                          `cbor:"aud"`
	Parent   *addr.Addr                          `cbor:"parent,omitempty"`
	Policy   *addr.Addr                          `cbor:"policy,omitempty"`
	Iat      uint64                              `cbor:"iat"`
	Exp      uint64                              `cbor:"exp"`
	Nonce    []byte                              `cbor:"nonce"`
	Depth    uint64                              `cbor:"depth"`
	Images   []addr.Addr                         `cbor:"images"`
	Ceilings map[device.Class]energy.Microjoules `cbor:"ceilings"`
	Caveats  Caveats                             `cbor:"caveats"`
}

// Terms are the grant's own terms.
func (g *Grant) Terms() Terms {
	return Terms{Exp: g.Exp, Images: g.Images, Ceilings: g.Ceilings, Caveats: g.Caveats}
}

// Template bounds the children a mint policy mints (§6).
type Template struct {
	TTL      uint64                              `cbor:"ttl"`
	Depth    uint64                              `cbor:"depth"`
	Images   []addr.Addr                         `cbor:"images"`
	Ceilings map[device.Class]energy.Microjoules `cbor:"ceilings"`
	Caveats  Caveats                             `cbor:"caveats"`
}

// Policy is a mint policy's payload (§6): a standing grant.
type Policy struct {
	V        uint64     `cbor:"v"`
	Iss      key.Public `cbor:"iss"`
	Grant    addr.Addr  `cbor:"grant"`
	Minter   key.Public `cbor:"minter"`
	To       key.Public `cbor:"to"`
	Template Template   `cbor:"template"`
	Max      uint64     `cbor:"max"`
	Rate     Rate       `cbor:"rate"`
	Events   []string   `cbor:"events"`
	Iat      uint64     `cbor:"iat"`
	Exp      uint64     `cbor:"exp"`
	Nonce    []byte     `cbor:"nonce"`
}

// Invocation is what an audience presents a chain with (§5).
type Invocation struct {
	V     uint64     `cbor:"v"`
	Iss   key.Public `cbor:"iss"`
	Grant addr.Addr  `cbor:"grant"`
	Image *addr.Addr `cbor:"image,omitempty"` // the image, where the presenter knows it
	Model string     `cbor:"model,omitempty"`
	Iat   uint64     `cbor:"iat"`
	Nonce []byte     `cbor:"nonce"`
}

// Amendment tightens a live grant (§8).
type Amendment struct {
	V        uint64                              `cbor:"v"`
	Iss      key.Public                          `cbor:"iss"`
	Grant    addr.Addr                           `cbor:"grant"`
	Seq      uint64                              `cbor:"seq"`
	Iat      uint64                              `cbor:"iat"`
	Exp      uint64                              `cbor:"exp"`
	Images   []addr.Addr                         `cbor:"images"`
	Ceilings map[device.Class]energy.Microjoules `cbor:"ceilings"`
	Caveats  Caveats                             `cbor:"caveats"`
}

// Terms are the amendment's new terms.
func (a *Amendment) Terms() Terms {
	return Terms{Exp: a.Exp, Images: a.Images, Ceilings: a.Ceilings, Caveats: a.Caveats}
}

// Revocation refuses a grant and its descendants (§7).
type Revocation struct {
	V     uint64     `cbor:"v"`
	Iss   key.Public `cbor:"iss"`
	Grant addr.Addr  `cbor:"grant"`
	Iat   uint64     `cbor:"iat"`
}

// Checkpoint is an audience's signed statement of where its run is (§8).
type Checkpoint struct {
	V     uint64     `cbor:"v"`
	Iss   key.Public `cbor:"iss"`
	Grant addr.Addr  `cbor:"grant"`
	Run   addr.Addr  `cbor:"run"`
	State *addr.Addr `cbor:"state,omitempty"`
	Seq   uint64     `cbor:"seq"`
	Iat   uint64     `cbor:"iat"`
}

// Decision is the gate's sealed verdict on one run (§5.1).
type Decision struct {
	V           uint64                              `cbor:"v"`
	Iss         key.Public                          `cbor:"iss"`
	Allow       bool                                `cbor:"allow"`
	Code        string                              `cbor:"code,omitempty"`
	Where       string                              `cbor:"where,omitempty"`
	Detail      string                              `cbor:"detail,omitempty"`
	Chain       []addr.Addr                         `cbor:"chain"`
	Invocation  *addr.Addr                          `cbor:"invocation,omitempty"`
	Image       addr.Addr                           `cbor:"image"`
	Tier        string                              `cbor:"tier"`
	Reserve     map[device.Class]energy.Microjoules `cbor:"reserve,omitempty"`
	Reservation uint64                              `cbor:"reservation,omitempty"`
	At          uint64                              `cbor:"at"`
}

// Token is one opened JCP object: exactly one of its payloads is set.
type Token struct {
	ID    addr.Addr // the address of Bytes
	Bytes []byte    // the envelope
	Type  string    // its content type

	Grant      *Grant
	Policy     *Policy
	Invocation *Invocation
	Amendment  *Amendment
	Revocation *Revocation
	Checkpoint *Checkpoint
	Decision   *Decision
}

// Signer is the key that signed t (its payload's iss).
func (t *Token) Signer() key.Public {
	switch {
	case t.Grant != nil:
		return t.Grant.Iss
	case t.Policy != nil:
		return t.Policy.Iss
	case t.Invocation != nil:
		return t.Invocation.Iss
	case t.Amendment != nil:
		return t.Amendment.Iss
	case t.Revocation != nil:
		return t.Revocation.Iss
	case t.Checkpoint != nil:
		return t.Checkpoint.Iss
	case t.Decision != nil:
		return t.Decision.Iss
	}
	return key.Public{}
}

// fields lists each payload's members: required, then optional.
var fields = map[string][2][]string{
	TypeGrant:      {{"v", "iss", "aud", "iat", "exp", "nonce", "depth", "images", "ceilings", "caveats"}, {"parent", "policy"}},
	TypePolicy:     {{"v", "iss", "grant", "minter", "to", "template", "max", "rate", "events", "iat", "exp", "nonce"}, nil},
	TypeInvocation: {{"v", "iss", "grant", "iat", "nonce"}, {"image", "model"}},
	TypeAmendment:  {{"v", "iss", "grant", "seq", "iat", "exp", "images", "ceilings", "caveats"}, nil},
	TypeRevocation: {{"v", "iss", "grant", "iat"}, nil},
	TypeCheckpoint: {{"v", "iss", "grant", "run", "seq", "iat"}, {"state"}},
	TypeDecision:   {{"v", "iss", "allow", "chain", "image", "tier", "at"}, {"code", "where", "detail", "invocation", "reserve", "reservation"}},
}

var templateFields = [2][]string{{"ttl", "depth", "images", "ceilings", "caveats"}, nil}

// caveatNames are the caveats of §3.1, the only ones there are.
var caveatNames = []string{"models", "tiers", "hosts", "paths", "runs", "rate"}

// MaxToken bounds one envelope's bytes.
const MaxToken = 64 << 10

// Open reads one JCP object from untrusted bytes, in the order of
// docs/spec/jcp.md §2 (receipt.md's steps): the envelope (the JCR-1
// profile), the payload's form (its bytes, members, types and canonical
// form), the signature under the payload's iss, then the payload's own
// value rules. It trusts nobody: which keys may sign what is Verify's and
// the ledger's.
func Open(b []byte) (*Token, error) {
	if len(b) > MaxToken {
		return nil, reject.New(reject.Invalid, "envelope", "%d bytes; a token is at most %d", len(b), MaxToken)
	}
	env, err := receipt.OpenEnvelope(b)
	if err != nil {
		return nil, err
	}
	t := &Token{ID: addr.Of(b), Bytes: b, Type: env.ContentType}
	if err := t.decode(env.Payload); err != nil {
		return nil, err
	}
	if !verified.has(t.ID) {
		if err := env.Verify(t.Signer(), "payload.iss"); err != nil {
			return nil, err
		}
		verified.add(t.ID)
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// verified remembers the envelopes whose signature verified, by the
// address of their whole bytes: the same bytes always verify the same
// way, and a gate sees the same chain's tokens decision after decision.
// Every other check runs on every Open.
var verified = &idSet{max: 1 << 16}

type idSet struct {
	mu   sync.Mutex
	max  int
	cur  map[addr.Addr]struct{}
	prev map[addr.Addr]struct{} // the generation before: cur's size bounded, the recent kept
}

func (s *idSet) has(a addr.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cur[a]; ok {
		return true
	}
	_, ok := s.prev[a]
	return ok
}

func (s *idSet) add(a addr.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cur) >= s.max/2 {
		s.prev, s.cur = s.cur, nil
	}
	if s.cur == nil {
		s.cur = map[addr.Addr]struct{}{}
	}
	s.cur[a] = struct{}{}
}

// decode reads a payload's form (§2 step 10), refusing in this order:
// the members of the payload, then of its template (a policy); the
// caveats (an unknown one, then one written empty) and every rate's
// members; the lengths of byte strings; the types, and a value that does
// not re-encode to its bytes; then the canonical form a re-encoding does
// not show (an all-zero address, a set out of order).
func (t *Token) decode(p []byte) error {
	f, ok := fields[t.Type]
	if !ok {
		return reject.New(reject.Header, "protected.content_type", "%q is not a JCP object", t.Type)
	}
	raw, err := members(p, "payload", f)
	if err != nil {
		return err
	}
	var tmpl map[string]cbor.RawMessage
	if t.Type == TypePolicy {
		if tmpl, err = members(raw["template"], "payload.template", templateFields); err != nil {
			return err
		}
	}
	for _, c := range []struct {
		b     []byte
		where string
	}{{raw["caveats"], "payload.caveats"}, {tmpl["caveats"], "payload.template.caveats"}} {
		if c.b != nil {
			if err := checkCaveats(c.b, c.where); err != nil {
				return err
			}
		}
	}
	if t.Type == TypePolicy {
		if _, err := members(raw["rate"], "payload.rate", rateFields); err != nil {
			return err
		}
	}
	if err := lengths(raw, "payload"); err != nil {
		return err
	}
	if err := lengths(tmpl, "payload.template"); err != nil {
		return err
	}
	var v any
	switch t.Type {
	case TypeGrant:
		t.Grant = &Grant{}
		v = t.Grant
	case TypePolicy:
		t.Policy = &Policy{}
		v = t.Policy
	case TypeInvocation:
		t.Invocation = &Invocation{}
		v = t.Invocation
	case TypeAmendment:
		t.Amendment = &Amendment{}
		v = t.Amendment
	case TypeRevocation:
		t.Revocation = &Revocation{}
		v = t.Revocation
	case TypeCheckpoint:
		t.Checkpoint = &Checkpoint{}
		v = t.Checkpoint
	case TypeDecision:
		t.Decision = &Decision{}
		v = t.Decision
	}
	if err := detcbor.Unmarshal(p, v); err != nil {
		return reject.In("payload", err)
	}
	return t.canonical()
}

// members decodes a map's members, refusing an unknown or a missing one,
// then one written null (canonical.md: a required member's null is not a
// value of its type, an optional member's is a second form of absent).
func members(b []byte, where string, f [2][]string) (map[string]cbor.RawMessage, error) {
	if err := detcbor.Check(b); err != nil {
		return nil, reject.In(where, err)
	}
	var m map[string]cbor.RawMessage
	if err := cbor.Unmarshal(b, &m); err != nil {
		return nil, reject.New(reject.Invalid, where, "must be a map with text keys: %v", err)
	}
	for _, k := range sortedKeys(m) {
		if !slices.Contains(f[0], k) && !slices.Contains(f[1], k) {
			return nil, reject.New(reject.UnknownField, where+"."+k, "not a member of this object")
		}
	}
	for _, k := range f[0] {
		if _, ok := m[k]; !ok {
			return nil, reject.New(reject.MissingField, where+"."+k, "required")
		}
	}
	for _, k := range sortedKeys(m) {
		if bytes.Equal(m[k], null) {
			if slices.Contains(f[0], k) {
				return nil, reject.New(reject.Invalid, where+"."+k, "null is not a value of this member")
			}
			return nil, reject.New(reject.NonCanonical, where+"."+k, "an absent member is left out, not written null")
		}
	}
	return m, nil
}

var null = []byte{0xf6}

func sortedKeys(m map[string]cbor.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// rateFields are a rate's members.
var rateFields = [2][]string{{"n", "per"}, nil}

// empty is how an optional caveat is written out empty: [], 0, {}, null.
var empty = [][]byte{{0x80}, {0x00}, {0xa0}, {0xf6}}

// checkCaveats refuses, in this order, an unknown caveat (every caveat is
// critical: unknown-critical), a caveat written out empty or null (an
// absent caveat is left out: non-canonical), and a rate's unknown,
// missing or null member.
func checkCaveats(b []byte, where string) error {
	var m map[string]cbor.RawMessage
	if err := cbor.Unmarshal(b, &m); err != nil {
		return reject.New(reject.Invalid, where, "must be a map with text keys: %v", err)
	}
	ks := sortedKeys(m)
	for _, k := range ks {
		if !slices.Contains(caveatNames, k) {
			return reject.New(reject.UnknownCritical, where+"."+k, "not a JCP/1 caveat: every caveat is critical, and an unknown one refuses the token")
		}
	}
	for _, k := range ks {
		for _, e := range empty {
			if bytes.Equal(m[k], e) {
				return reject.New(reject.NonCanonical, where+"."+k, "written out empty (%x); a caveat that restricts nothing is left out", e)
			}
		}
	}
	if r, ok := m["rate"]; ok {
		if _, err := members(r, where+".rate", rateFields); err != nil {
			return err
		}
	}
	return nil
}

// The byte strings of a fixed length (§2): ids, keys and nonces, alone or
// in a list.
var (
	bstr32     = []string{"iss", "aud", "parent", "policy", "grant", "minter", "to", "image", "run", "state", "invocation"}
	bstr32List = []string{"images", "chain"}
)

// lengths refuses a byte string of another length than its member's
// (invalid: not a value of its type). A value that is no byte string is
// left to the type check.
func lengths(m map[string]cbor.RawMessage, where string) error {
	want := func(k string, i int, b []byte, n int) error {
		if len(b) == n {
			return nil
		}
		at := where + "." + k
		if i >= 0 {
			at = fmt.Sprintf("%s[%d]", at, i)
		}
		return reject.New(reject.Invalid, at, "%d bytes; a bstr(%d)", len(b), n)
	}
	for _, k := range sortedKeys(m) {
		switch {
		case slices.Contains(bstr32, k):
			var b []byte
			if cbor.Unmarshal(m[k], &b) == nil {
				if err := want(k, -1, b, addr.Size); err != nil {
					return err
				}
			}
		case k == "nonce":
			var b []byte
			if cbor.Unmarshal(m[k], &b) == nil {
				if err := want(k, -1, b, 16); err != nil {
					return err
				}
			}
		case slices.Contains(bstr32List, k):
			var bs [][]byte
			if cbor.Unmarshal(m[k], &bs) == nil {
				for i, b := range bs {
					if err := want(k, i, b, addr.Size); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
