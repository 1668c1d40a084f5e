package vectors

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
)

// jcpGen builds the JCP vectors: every token from a fixed key, nonce and
// time, so the bytes are the same on every generation (Ed25519 is
// deterministic).
type jcpGen struct {
	now  time.Time
	s    uint64 // now, Unix seconds
	err  error
	keys map[string]key.Private

	im1, im2, im3 addr.Addr
	g0, g1, g2    *jcp.Token // the chain root → alice → bob → carol
	long          []*jcp.Token
}

func (b *jcpGen) key(name string) key.Private {
	if k, ok := b.keys[name]; ok {
		return k
	}
	k := jcpKey(name)
	b.keys[name] = k
	return k
}

func (b *jcpGen) pub(name string) key.Public { return b.key(name).Public() }

func (b *jcpGen) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// seal seals a payload with k, its nonce (where it has one) fixed by label.
func (b *jcpGen) seal(v any, signer string, label string) *jcp.Token {
	switch p := v.(type) {
	case *jcp.Grant:
		p.Nonce = nonceOf(label)
	case *jcp.Policy:
		p.Nonce = nonceOf(label)
	case *jcp.Invocation:
		p.Nonce = nonceOf(label)
	}
	t, err := jcp.Seal(v, b.key(signer))
	if err != nil {
		b.fail(fmt.Errorf("%s: %w", label, err))
		return &jcp.Token{}
	}
	return t
}

// The root grant's terms.
func (b *jcpGen) rootCaveats() jcp.Caveats {
	return jcp.Caveats{
		Models: []string{"llama-3-8b", "qwen-7b"},
		Tiers:  []string{"S1", "S2", "S5"},
		Hosts:  []string{"*.example.com:443", "10.0.0.0/8", "[2001:db8::/32]:443"},
		Paths:  []string{"/data", "/srv"},
		Runs:   100,
		Rate:   &jcp.Rate{N: 10, Per: 60},
	}
}

func (b *jcpGen) rootGrant(iss, aud string, label string, edit func(*jcp.Grant)) *jcp.Token {
	g := &jcp.Grant{
		Aud: b.pub(aud), Iat: b.s - 3600, Exp: b.s + 86400, Depth: 8,
		Images:   sortAddrs(b.im1, b.im2),
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1_000_000_000, device.GPU: 500_000_000},
		Caveats:  b.rootCaveats(),
	}
	if edit != nil {
		edit(g)
	}
	return b.seal(g, iss, label)
}

// child is a grant its parent's audience (signer) delegates to aud: the
// parent's terms, depth one less, expiring 10 s earlier, then edit.
func (b *jcpGen) child(parent *jcp.Token, signer, aud, label string, edit func(*jcp.Grant)) *jcp.Token {
	p := parent.Grant
	if p == nil {
		b.fail(fmt.Errorf("%s: the parent is not a grant", label))
		return &jcp.Token{}
	}
	id := parent.ID
	g := &jcp.Grant{Aud: b.pub(aud), Parent: &id, Iat: p.Iat, Exp: p.Exp - 10, Images: slices.Clone(p.Images),
		Ceilings: maps.Clone(p.Ceilings), Caveats: cloneCaveats(p.Caveats)}
	if p.Depth > 0 {
		g.Depth = p.Depth - 1
	}
	if edit != nil {
		edit(g)
	}
	return b.seal(g, signer, label)
}

func cloneCaveats(c jcp.Caveats) jcp.Caveats {
	out := jcp.Caveats{Models: slices.Clone(c.Models), Tiers: slices.Clone(c.Tiers), Hosts: slices.Clone(c.Hosts),
		Paths: slices.Clone(c.Paths), Runs: c.Runs}
	if c.Rate != nil {
		r := *c.Rate
		out.Rate = &r
	}
	return out
}

func (b *jcpGen) invocation(signer string, g *jcp.Token, label string, edit func(*jcp.Invocation)) *jcp.Token {
	im := b.im1
	i := &jcp.Invocation{Grant: g.ID, Image: &im, Model: "llama-3-8b", Iat: b.s}
	if edit != nil {
		edit(i)
	}
	return b.seal(i, signer, label)
}

// payload is t's payload as a generic map, to be changed and sealed again.
func (b *jcpGen) payload(t *jcp.Token) map[string]any {
	env, err := receipt.OpenEnvelope(t.Bytes)
	if err != nil {
		b.fail(err)
		return map[string]any{}
	}
	var m map[string]any
	b.fail(cbor.Unmarshal(env.Payload, &m))
	return m
}

// resign seals payload bytes exactly as given, as t's type, signed by
// signer: only the payload's form is wrong, never the signature.
func (b *jcpGen) resign(t *jcp.Token, signer string, payload []byte) []byte {
	out, err := receipt.SealAs(payload, b.key(signer), t.Type)
	b.fail(err)
	return out
}

// edited is t with its payload changed by edit, signed again by signer.
func (b *jcpGen) edited(t *jcp.Token, signer string, edit func(m map[string]any)) []byte {
	m := b.payload(t)
	edit(m)
	p, err := detcbor.Marshal(m)
	b.fail(err)
	return b.resign(t, signer, p)
}

func caveatsOf(m map[string]any) map[any]any { return m["caveats"].(map[any]any) }

func (b *jcpGen) rawPayload(t *jcp.Token) []byte {
	env, err := receipt.OpenEnvelope(t.Bytes)
	if err != nil {
		b.fail(err)
		return nil
	}
	return env.Payload
}

// jcpVectors builds jcp.json and standing.json.
func jcpVectors() (jcpFile, standingFile []byte, err error) {
	b := &jcpGen{now: t0, s: uint64(t0.Unix()), keys: map[string]key.Private{}}
	b.keys["root"] = TestKey()
	b.keys["other"] = OtherKey()
	b.im1, b.im2, b.im3 = addr.Of([]byte("jcp vectors: image 1")), addr.Of([]byte("jcp vectors: image 2")), addr.Of([]byte("jcp vectors: image 3"))

	b.g0 = b.rootGrant("root", "alice", "g0", nil)
	b.g1 = b.child(b.g0, "alice", "bob", "g1", func(g *jcp.Grant) {
		g.Ceilings = map[device.Class]energy.Microjoules{device.CPU: 500_000_000, device.GPU: 100_000_000}
		g.Caveats = jcp.Caveats{Models: []string{"llama-3-8b"}, Tiers: []string{"S1", "S2"},
			Hosts: []string{"10.1.0.0/16", "[2001:db8::/48]:443", "api.example.com:443"},
			Paths: []string{"/data"}, Runs: 50, Rate: &jcp.Rate{N: 5, Per: 120}}
	})
	b.g2 = b.child(b.g1, "bob", "carol", "g2", func(g *jcp.Grant) {
		g.Images = []addr.Addr{b.im1}
		g.Ceilings = map[device.Class]energy.Microjoules{device.CPU: 100_000_000}
		g.Caveats.Hosts = []string{"10.1.2.3", "api.example.com:443"}
		g.Caveats.Paths = []string{"/data/in"}
		g.Caveats.Runs = 20
	})
	// An eight-grant chain below g2: each narrower, the hosts' address
	// spelt as its /32 prefix.
	b.long = []*jcp.Token{b.g0, b.g1, b.g2}
	names := []string{"carol", "dave", "erin", "frank", "grace", "heidi"}
	for i := 0; i < 5; i++ {
		prev := b.long[len(b.long)-1]
		b.long = append(b.long, b.child(prev, names[i], names[i+1], fmt.Sprintf("long %d", i+3), func(g *jcp.Grant) {
			g.Ceilings[device.CPU] -= 1_000_000
			if i == 0 {
				g.Caveats.Hosts = []string{"10.1.2.3/32", "api.example.com:443"}
			}
		}))
	}

	cases := b.chainCases()
	cases = append(cases, b.decisionCases()...)
	cases = append(cases, b.amendmentCases()...)
	cases = append(cases, b.ledgerCases()...)
	standing := b.standingCases()
	if b.err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errJCP, b.err)
	}
	roots := []key.Public{TestKey().Public()}
	mk := func(cs []JCPCase) ([]byte, error) {
		seen := map[string]bool{}
		for _, c := range cs {
			if seen[c.Name] {
				return nil, fmt.Errorf("%w: the case %s twice", errJCP, c.Name)
			}
			seen[c.Name] = true
		}
		return jcs.Marshal(JCPVectors{Type: JCPType, Roots: roots, Now: t0.Unix(), Cases: cs})
	}
	if jcpFile, err = mk(cases); err != nil {
		return nil, nil, err
	}
	if standingFile, err = mk(standing); err != nil {
		return nil, nil, err
	}
	return jcpFile, standingFile, nil
}

func chainOf(ts ...*jcp.Token) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = b64url.EncodeToString(t.Bytes)
	}
	return out
}

func chainBytes(bs ...[]byte) []string {
	out := make([]string, len(bs))
	for i, x := range bs {
		out[i] = b64url.EncodeToString(x)
	}
	return out
}

// chainCases: §2 envelopes and payloads, §3.2 attenuation, §4 chains.
func (b *jcpGen) chainCases() []JCPCase {
	var cs []JCPCase
	add := func(name, about, expect string, chain []string) {
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseChain, Chain: chain, Expect: expect})
	}
	g0, g1, g2 := b.g0, b.g1, b.g2
	add("chain-depth-1", "a root grant alone, issued by the trusted root", ExpectOK, chainOf(g0))
	add("chain-depth-3", "a root and two narrower delegations (IPv6 prefixes with a port, an address under a prefix)", ExpectOK, chainOf(g0, g1, g2))
	add("chain-depth-8", "eight grants, each narrower than its parent; the sixth's hosts spell g2's address 10.1.2.3 as the prefix 10.1.2.3/32, which it covers", ExpectOK, chainOf(b.long...))

	// §3.2: each widening, one term at a time, a child of g0 by alice.
	w := func(name, about, code string, edit func(*jcp.Grant)) {
		add(name, about, code, chainOf(g0, b.child(g0, "alice", "bob", name, edit)))
	}
	w("widen-depth", "a child whose depth is its parent's (8): at most 7 may follow", "widen-depth", func(g *jcp.Grant) { g.Depth = 8 })
	w("widen-images", "a child naming an image its parent does not", "widen-images", func(g *jcp.Grant) { g.Images = sortAddrs(b.im1, b.im3) })
	w("widen-ceiling-higher", "a child whose Cpu ceiling is 1 µJ above its parent's", "widen-ceiling", func(g *jcp.Grant) { g.Ceilings[device.CPU]++ })
	w("widen-ceiling-class", "a child with a ceiling for a class (Npu) its parent gives none of", "widen-ceiling", func(g *jcp.Grant) { g.Ceilings[device.NPU] = 1 })
	w("widen-expiry", "a child expiring 1 s after its parent", "widen-expiry", func(g *jcp.Grant) { g.Exp = g0.Grant.Exp + 1 })
	w("widen-models", "a child model outside the parent's models", "widen-models", func(g *jcp.Grant) { g.Caveats.Models = []string{"gpt-5", "llama-3-8b"} })
	w("widen-models-dropped", "the parent limits models and the child drops the caveat", "widen-models", func(g *jcp.Grant) { g.Caveats.Models = nil })
	w("widen-tiers", "a child tier outside the parent's tiers", "widen-tiers", func(g *jcp.Grant) { g.Caveats.Tiers = []string{"S1", "S7"} })
	w("widen-hosts-domain", "a child host outside the parent's patterns", "widen-hosts", func(g *jcp.Grant) {
		g.Caveats.Hosts = []string{"*.example.com:443", "10.0.0.0/8", "api.example.org:443"}
	})
	w("widen-hosts-port", "a port-less child pattern under a parent pattern with a port", "widen-hosts", func(g *jcp.Grant) { g.Caveats.Hosts = []string{"*.example.com"} })
	w("widen-hosts-prefix", "a shorter prefix than the parent's", "widen-hosts", func(g *jcp.Grant) { g.Caveats.Hosts = []string{"10.0.0.0/7"} })
	w("widen-hosts-wildcard", "*.com under *.example.com", "widen-hosts", func(g *jcp.Grant) { g.Caveats.Hosts = []string{"*.com:443"} })
	w("widen-paths", "/database is not below /data", "widen-paths", func(g *jcp.Grant) { g.Caveats.Paths = []string{"/database"} })
	w("widen-runs", "a child allowing more runs than its parent", "widen-runs", func(g *jcp.Grant) { g.Caveats.Runs = 101 })
	w("widen-rate", "a child rate n above its parent's", "widen-rate", func(g *jcp.Grant) { g.Caveats.Rate = &jcp.Rate{N: 11, Per: 60} })
	w("widen-rate-per", "a child rate window shorter than its parent's", "widen-rate", func(g *jcp.Grant) { g.Caveats.Rate = &jcp.Rate{N: 10, Per: 59} })
	w("widen-first-term", "widens the ceilings and the tiers: ceilings come first in §3.2", "widen-ceiling", func(g *jcp.Grant) {
		g.Ceilings[device.CPU] *= 2
		g.Caveats.Tiers = []string{"S7"}
	})
	w("narrow-hosts", "a name under *.example.com:443, an address with any port under 10.0.0.0/8, a longer IPv6 prefix", ExpectOK, func(g *jcp.Grant) {
		g.Caveats.Hosts = []string{"10.2.3.4:8080", "[2001:db8:1::/48]:443", "api.eu.example.com:443"}
	})
	d0 := b.rootGrant("root", "alice", "depth 0", func(g *jcp.Grant) { g.Depth = 0 })
	add("depth-exhausted", "a delegation below a grant of depth 0", "depth-exhausted",
		chainOf(d0, b.child(d0, "alice", "bob", "below depth 0", nil)))

	// §4: links and times.
	add("wrong-issuer", "g1 signed by a key that is not g0's audience", "wrong-issuer",
		chainOf(g0, b.child(g0, "mallory", "bob", "by mallory", nil)))
	add("untrusted-root", "a root grant issued by a key not among the roots", "untrusted-root",
		chainOf(b.rootGrant("other", "alice", "other root", nil)))
	add("broken-chain-loop", "the same grant twice: the second's parent is not the first", "broken-chain", chainOf(g0, g1, g1))
	dangling := addr.Of([]byte("jcp vectors: no grant"))
	add("broken-chain-dangling", "a parent id that names no grant of the chain", "broken-chain",
		chainOf(g0, b.child(g0, "alice", "bob", "dangling", func(g *jcp.Grant) { g.Parent = &dangling })))
	add("broken-chain-skip", "g2 after g0, skipping g1", "broken-chain", chainOf(g0, g2))
	add("broken-chain-root-parent", "a first grant with a parent", "broken-chain", chainOf(g1, g2))
	long := make([]*jcp.Token, 65)
	for i := range long {
		long[i] = g0
	}
	add("chain-depth-65", "65 elements", "chain-depth", chainOf(long...))
	add("chain-depth-0", "no elements", "chain-depth", nil)
	add("expired", "g1 expired at now", "expired", chainOf(g0, b.child(g0, "alice", "bob", "expired", func(g *jcp.Grant) {
		g.Iat, g.Exp = b.s-1000, b.s
	})))
	add("not-yet", "g1 issued 301 s after now", "not-yet", chainOf(g0, b.child(g0, "alice", "bob", "not yet", func(g *jcp.Grant) {
		g.Iat, g.Exp = b.s+301, b.s+1000
	})))
	add("not-yet-skew", "g1 issued 300 s after now: within the skew", ExpectOK, chainOf(g0, b.child(g0, "alice", "bob", "skew", func(g *jcp.Grant) {
		g.Iat, g.Exp = b.s+300, b.s+1000
	})))
	add("element-order", "g1 widens its images and g2's parent is not g1: the chain is checked element by element, so g1's widening first", "widen-images",
		chainOf(g0, b.child(g0, "alice", "bob", "g1 wide images", func(g *jcp.Grant) { g.Images = sortAddrs(b.im1, b.im2, b.im3) }), g2))
	add("time-before-link", "g1 expired and signed by a stranger: an element's times before its links", "expired",
		chainOf(g0, b.child(g0, "mallory", "bob", "expired stranger", func(g *jcp.Grant) { g.Iat, g.Exp = b.s-1000, b.s-1 })))
	add("invalid-element", "an invocation inside a chain", "invalid", chainOf(g0, b.invocation("alice", g0, "in a chain", nil)))

	// §2: the envelope and the payload.
	add("malformed-untagged", "g0's COSE_Sign1 without its tag 18", "malformed", chainBytes(g0.Bytes[1:]))
	add("malformed-not-cbor", "bytes that are not a CBOR item", "malformed", chainBytes([]byte{0xff, 0x00}))
	add("truncated", "g0 without its last 10 bytes", "truncated", chainBytes(g0.Bytes[:len(g0.Bytes)-10]))
	p0 := b.rawPayload(g0)
	add("cbor-non-shortest", "g0's payload with v: 1 written 0x1801 (signed again)", "cbor-non-shortest",
		chainBytes(b.resign(g0, "root", bytes.Replace(p0, []byte{0x61, 'v', 0x01}, []byte{0x61, 'v', 0x18, 0x01}, 1))))
	if ents, err := pairs(p0); err == nil {
		ents[0], ents[1] = ents[1], ents[0]
		add("cbor-unsorted-keys", "g0's payload with its first two keys swapped (signed again)", "cbor-unsorted-keys",
			chainBytes(b.resign(g0, "root", mapOf(ents))))
		ents[0], ents[1] = ents[1], ents[0]
		add("duplicate-key", "g0's payload with its first key twice (signed again)", "duplicate-key",
			chainBytes(b.resign(g0, "root", mapOf(append([][2][]byte{ents[0]}, ents...)))))
	} else {
		b.fail(err)
	}
	add("cbor-indefinite", "g0's payload as an indefinite-length map (signed again)", "cbor-indefinite",
		chainBytes(b.resign(g0, "root", append(append([]byte{0xbf}, p0[1:]...), 0xff))))
	rg := func(name, about, code string, edit func(m map[string]any)) {
		add(name, about, code, chainBytes(b.edited(g0, "root", edit)))
	}
	rg("non-canonical-empty-models", "an optional caveat written as the empty set", "non-canonical", func(m map[string]any) { caveatsOf(m)["models"] = []any{} })
	rg("non-canonical-runs-0", "an optional caveat written as 0", "non-canonical", func(m map[string]any) { caveatsOf(m)["runs"] = uint64(0) })
	rg("non-canonical-zero-parent", "an optional address (parent) written all zero: absent is left out", "non-canonical", func(m map[string]any) { m["parent"] = make([]byte, 32) })
	rg("non-canonical-images-order", "images out of order", "non-canonical", func(m map[string]any) {
		im := m["images"].([]any)
		im[0], im[1] = im[1], im[0]
	})
	rg("non-canonical-tiers-repeat", "a tier twice", "non-canonical", func(m map[string]any) { caveatsOf(m)["tiers"] = []any{"S1", "S1"} })
	rg("non-canonical-tag", "iat wrapped in tag 1: a payload holds no tags", "non-canonical", func(m map[string]any) {
		m["iat"] = cbor.Tag{Number: 1, Content: m["iat"]}
	})
	rg("missing-field-zero-image", "an image all zero: names nothing", "missing-field", func(m map[string]any) { m["images"].([]any)[0] = make([]byte, 32) })
	rg("invalid-null-required", "depth written null: not a value of its type", "invalid", func(m map[string]any) { m["depth"] = nil })
	rg("non-canonical-null-optional", "parent written null: an absent member is left out", "non-canonical", func(m map[string]any) { m["parent"] = nil })
	rg("unknown-field", "a payload member admin", "unknown-field", func(m map[string]any) { m["admin"] = true })
	rg("missing-field", "a grant without its nonce", "missing-field", func(m map[string]any) { delete(m, "nonce") })
	rg("missing-field-rate", "a rate caveat without n", "missing-field", func(m map[string]any) { caveatsOf(m)["rate"] = map[string]any{"per": uint64(60)} })
	rg("unknown-critical", "a caveat outside the closed set: every caveat is critical", "unknown-critical", func(m map[string]any) { caveatsOf(m)["gpu-model"] = "H100" })
	rg("invalid-type", "depth as a text string", "invalid", func(m map[string]any) { m["depth"] = "8" })
	rg("invalid-length", "an aud of 31 bytes", "invalid", func(m map[string]any) { m["aud"] = make([]byte, 31) })
	rg("invalid-nonce", "a nonce of 15 bytes", "invalid", func(m map[string]any) { m["nonce"] = make([]byte, 15) })
	rg("invalid-version", "v 2", "invalid", func(m map[string]any) { m["v"] = uint64(2) })
	rg("invalid-exp", "exp not after iat", "invalid", func(m map[string]any) { m["exp"] = m["iat"] })
	rg("invalid-class", "a ceiling for the class Fpga", "invalid", func(m map[string]any) { m["ceilings"].(map[any]any)["Fpga"] = uint64(1) })
	rg("invalid-ceiling-zero", "a ceiling of 0", "invalid", func(m map[string]any) { m["ceilings"].(map[any]any)["Gpu"] = uint64(0) })
	rg("invalid-depth", "depth 65", "invalid", func(m map[string]any) { m["depth"] = uint64(65) })
	rg("invalid-tier", "the tier S8", "invalid", func(m map[string]any) { caveatsOf(m)["tiers"] = []any{"S1", "S8"} })
	rg("invalid-host-case", "a host pattern in upper case", "invalid", func(m map[string]any) { caveatsOf(m)["hosts"] = []any{"API.example.com"} })
	rg("invalid-host-bits", "a prefix with host bits set", "invalid", func(m map[string]any) { caveatsOf(m)["hosts"] = []any{"10.1.0.0/8"} })
	rg("invalid-host-ipv6-text", "an IPv6 address not in its canonical text", "invalid", func(m map[string]any) { caveatsOf(m)["hosts"] = []any{"2001:DB8::1"} })
	rg("invalid-host-brackets", "an IPv6 address in brackets without a port", "invalid", func(m map[string]any) { caveatsOf(m)["hosts"] = []any{"[2001:db8::1]"} })
	rg("invalid-path", "a path that is not clean", "invalid", func(m map[string]any) { caveatsOf(m)["paths"] = []any{"/data/../etc"} })
	rg("invalid-policy-without-parent", "a root naming a mint policy", "invalid", func(m map[string]any) { m["policy"] = b.g1.ID[:] })
	flipped := bytes.Clone(g1.Bytes)
	flipped[len(flipped)-1] ^= 1
	add("signature-flipped", "g1 with one bit of its signature flipped", "signature", chainBytes(g0.Bytes, flipped))
	if sp, err := withSignature(g1.Bytes, plusL); err == nil {
		add("signature-s-plus-l", "g1 with S + L in its signature", "signature", chainBytes(g0.Bytes, sp))
	} else {
		b.fail(err)
	}
	add("signature-first", "v 2 under a flipped signature: the signature before the value rules", "signature", func() []string {
		x := b.edited(g0, "root", func(m map[string]any) { m["v"] = uint64(2) })
		x[len(x)-1] ^= 1
		return chainBytes(x)
	}())
	weak := func(iss key.Public, label string) []byte {
		m := b.payload(g0)
		m["iss"] = iss[:]
		m["nonce"] = nonceOf(label)
		pl, err := detcbor.Marshal(m)
		b.fail(err)
		id := iss.ID()
		prot, err := detcbor.Marshal(map[int64]any{1: receipt.AlgEdDSA, 3: jcp.TypeGrant, 4: id[:]})
		b.fail(err)
		out, err := rawSign1(prot, pl, forgedSig)
		b.fail(err)
		return out
	}
	add("weak-key", "a root issued by the identity point, with R the base point and S = 1 (which verifies under the bare equation)", "weak-key",
		chainBytes(weak(identityKey, "weak")))
	add("weak-key-not-a-point", "an issuer whose 32 bytes decode to no curve point", "weak-key", chainBytes(weak(notAPoint(), "not a point")))
	add("header-kid", "kid names alice, the payload's iss is the root", "header", chainBytes(func() []byte {
		id := b.pub("alice").ID()
		out, err := receipt.SealPayload(b.rawPayload(g0), b.key("root"), receipt.AlgEdDSA, map[int64]any{3: jcp.TypeGrant, 4: id[:]})
		b.fail(err)
		return out
	}()))
	add("header-content-type", "a grant under the receipt's content type", "header",
		chainBytes(func() []byte {
			out, err := receipt.SealAs(b.rawPayload(g0), b.key("root"), receipt.ContentType)
			b.fail(err)
			return out
		}()))
	return cs
}

// notAPoint is the first y (2, 3, …, little-endian) that no curve point
// has: 32 bytes that are not an Ed25519 key at all.
func notAPoint() key.Public {
	for y := byte(2); ; y++ {
		p := key.Public{y}
		if err := p.Check(); err != nil && strings.Contains(err.Error(), "not a point") {
			return p
		}
	}
}

// decisionCases: §5, each run presented to a gate with an empty ledger.
func (b *jcpGen) decisionCases() []JCPCase {
	var cs []JCPCase
	g0, g1, g2 := b.g0, b.g1, b.g2
	base := func() *JCPAsk {
		return &JCPAsk{Image: b.im1, Tier: "S1", Classes: map[string]uint64{"Cpu": 1_000_000},
			Hosts: []string{"api.example.com:443"}, Paths: []string{"/data/in/x"}, Model: "llama-3-8b"}
	}
	n := 0
	add := func(name, about, expect string, chain []*jcp.Token, inv *jcp.Token, edit func(*JCPAsk)) {
		if chain == nil {
			chain = []*jcp.Token{g0, g1, g2}
		}
		if inv == nil {
			n++
			inv = b.invocation("carol", chain[len(chain)-1], fmt.Sprintf("invocation %d", n), nil)
		}
		a := base()
		if edit != nil {
			edit(a)
		}
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseDecision, Chain: chainOf(chain...),
			Invocation: b64url.EncodeToString(inv.Bytes), Ask: a, Expect: expect})
	}
	inv := func(signer string, g *jcp.Token, label string, edit func(*jcp.Invocation)) *jcp.Token {
		return b.invocation(signer, g, label, edit)
	}
	add("decide-ok", "a run within every grant of the chain", ExpectOK, nil, nil, nil)
	add("decide-at-ceiling", "a Cpu budget of exactly g2's ceiling", ExpectOK, nil, nil, func(a *JCPAsk) { a.Classes["Cpu"] = 100_000_000 })
	add("decide-depth-8", "a run presented with the eight-grant chain by its last audience", ExpectOK, b.long,
		inv("heidi", b.long[7], "invocation long", nil), nil)
	add("decide-address", "10.1.2.3:8080: under 10.0.0.0/8 (any port), 10.1.0.0/16 and the address 10.1.2.3", ExpectOK, nil, nil,
		func(a *JCPAsk) { a.Hosts = []string{"10.1.2.3:8080"} })
	add("decide-ipv6", "[2001:db8::5]:443 presented with g0, g1 by bob: under [2001:db8::/48]:443", ExpectOK, []*jcp.Token{g0, g1},
		inv("bob", g1, "invocation ipv6", nil), func(a *JCPAsk) { a.Hosts = []string{"[2001:db8::5]:443"}; a.Paths = []string{"/data/x"} })
	add("decide-image-not-granted", "the run's image is image 2: g0 and g1 grant it, g2 does not (the invocation names no image)", "image-not-granted", nil,
		inv("carol", g2, "invocation no image", func(i *jcp.Invocation) { i.Image = nil }), func(a *JCPAsk) { a.Image = b.im2 })
	add("decide-image-not-invoked", "the invocation names image 1, the run runs image 2", "image-not-granted", nil, nil,
		func(a *JCPAsk) { a.Image = b.im2 })
	add("decide-image-ungranted-everywhere", "image 3: no grant names it", "image-not-granted", nil,
		inv("carol", g2, "invocation image 3", func(i *jcp.Invocation) { i.Image = &b.im3 }), func(a *JCPAsk) { a.Image = b.im3 })
	add("decide-model-not-granted", "the invocation names qwen-7b: g0 grants it, g1 does not", "model-not-granted", nil,
		inv("carol", g2, "invocation qwen", func(i *jcp.Invocation) { i.Model = "qwen-7b" }), func(a *JCPAsk) { a.Model = "qwen-7b" })
	add("decide-no-model", "the grants limit models and the invocation names none", "model-not-granted", nil,
		inv("carol", g2, "invocation no model", func(i *jcp.Invocation) { i.Model = "" }), func(a *JCPAsk) { a.Model = "" })
	add("decide-model-is-the-invocations", "the ask repeats llama-3-8b but the invocation names qwen-7b: the invocation's counts", "model-not-granted", nil,
		inv("carol", g2, "invocation qwen 2", func(i *jcp.Invocation) { i.Model = "qwen-7b" }), nil)
	add("decide-tier-not-granted", "tier S5: g0 grants it, g1 does not", "tier-not-granted", nil, nil, func(a *JCPAsk) { a.Tier = "S5" })
	add("decide-host-not-granted", "www.example.com:443: under g0's *.example.com:443, not g1's names", "host-not-granted", nil, nil,
		func(a *JCPAsk) { a.Hosts = []string{"www.example.com:443"} })
	add("decide-host-port", "api.example.com on port 80", "host-not-granted", nil, nil, func(a *JCPAsk) { a.Hosts = []string{"api.example.com:80"} })
	add("decide-path-not-granted", "/data/out: within /data, not g2's /data/in", "path-not-granted", nil, nil, func(a *JCPAsk) { a.Paths = []string{"/data/out"} })
	add("decide-path-unclean", "/data/in/../../etc: a path that is not clean is within nothing", "path-not-granted", nil, nil,
		func(a *JCPAsk) { a.Paths = []string{"/data/in/../../etc"} })
	add("decide-class-not-granted", "a Npu budget: no grant has a Npu ceiling", "class-not-granted", nil, nil,
		func(a *JCPAsk) { a.Classes["Npu"] = 1 })
	add("decide-class-of-one-grant", "a Gpu budget: g0 and g1 have Gpu ceilings, g2 none", "class-not-granted", nil, nil,
		func(a *JCPAsk) { a.Classes["Gpu"] = 1 })
	add("decide-ceiling-undeclared", "the unit's Cpu with no budget declared (0)", "ceiling-undeclared", nil, nil, func(a *JCPAsk) { a.Classes["Cpu"] = 0 })
	add("decide-over-ceiling", "a Cpu budget 1 µJ above g2's ceiling", "over-ceiling", nil, nil, func(a *JCPAsk) { a.Classes["Cpu"] = 100_000_001 })
	add("decide-grant-by-grant", "tier S5 refused by g1, a Gpu class refused by g2: grant by grant, root first, so g1's tier", "tier-not-granted", nil, nil,
		func(a *JCPAsk) { a.Tier = "S5"; a.Classes["Gpu"] = 1 })
	add("decide-wrong-audience", "an invocation signed by g2's issuer (bob), not its audience", "wrong-audience", nil,
		inv("bob", g2, "invocation by bob", nil), nil)
	add("decide-broken-chain", "an invocation naming g1, not the chain's last grant", "broken-chain", nil,
		inv("carol", g1, "invocation of g1", nil), nil)
	add("decide-grant-before-audience", "an invocation by bob naming g1: the grant it names first", "broken-chain", nil,
		inv("bob", g1, "invocation of g1 by bob", nil), nil)
	add("decide-stale", "an invocation made 301 s before now", "stale-invocation", nil,
		inv("carol", g2, "invocation stale", func(i *jcp.Invocation) { i.Iat = b.s - 301 }), nil)
	add("decide-future", "an invocation made 301 s after now", "stale-invocation", nil,
		inv("carol", g2, "invocation future", func(i *jcp.Invocation) { i.Iat = b.s + 301 }), nil)
	add("decide-skew", "an invocation made 300 s before now: within the skew", ExpectOK, nil,
		inv("carol", g2, "invocation skew", func(i *jcp.Invocation) { i.Iat = b.s - 300 }), nil)
	exp := b.child(g0, "alice", "bob", "decide expired", func(g *jcp.Grant) { g.Iat, g.Exp = b.s-1000, b.s-1 })
	add("decide-chain-first", "an expired chain and a stale invocation: the chain is verified first", "expired", []*jcp.Token{g0, exp},
		inv("bob", exp, "invocation of an expired grant", func(i *jcp.Invocation) { i.Iat = b.s - 1000 }), nil)
	add("decide-invocation-flipped", "the invocation's signature flipped", "signature", nil, func() *jcp.Token {
		t := *b.invocation("carol", g2, "invocation flipped", nil)
		t.Bytes = bytes.Clone(t.Bytes)
		t.Bytes[len(t.Bytes)-1] ^= 1
		return &t
	}(), nil)
	return cs
}

// amendmentCases: §8, each amendment recorded against the chain's last
// grant.
func (b *jcpGen) amendmentCases() []JCPCase {
	var cs []JCPCase
	g0, g1 := b.g0, b.g1
	add := func(name, about, expect string, ams ...*jcp.Token) {
		var s []string
		for _, a := range ams {
			s = append(s, b64url.EncodeToString(a.Bytes))
		}
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseAmendment, Chain: chainOf(g0, g1), Amendments: s, Expect: expect})
	}
	am := func(signer string, g *jcp.Token, seq uint64, edit func(*jcp.Amendment)) *jcp.Token {
		p := g.Grant
		a := &jcp.Amendment{Grant: g.ID, Seq: seq, Iat: b.s, Exp: p.Exp, Images: slices.Clone(p.Images),
			Ceilings: maps.Clone(p.Ceilings), Caveats: cloneCaveats(p.Caveats)}
		if edit != nil {
			edit(a)
		}
		return b.seal(a, signer, "amendment")
	}
	cpu := func(uj energy.Microjoules) func(*jcp.Amendment) {
		return func(a *jcp.Amendment) { a.Ceilings = map[device.Class]energy.Microjoules{device.CPU: uj} }
	}
	add("amend-ok", "g1's issuer (alice) lowers its Cpu ceiling and drops Gpu", ExpectOK, am("alice", g1, 1, cpu(100_000_000)))
	add("amend-ok-twice", "two tightenings, seq 1 then 5", ExpectOK, am("alice", g1, 1, cpu(200_000_000)), am("alice", g1, 5, cpu(100_000_000)))
	add("amend-not-issuer", "g1's audience (bob) amends its own grant", "amend-not-issuer", am("bob", g1, 1, cpu(100_000_000)))
	add("amend-not-issuer-stranger", "a stranger amends g1", "amend-not-issuer", am("mallory", g1, 1, cpu(100_000_000)))
	add("amend-widens", "a Cpu ceiling 1 µJ above g1's", "amend-widens", am("alice", g1, 1, func(a *jcp.Amendment) { a.Ceilings[device.CPU]++ }))
	add("amend-widens-effective", "back up after a tightening: wider than the effective terms, not than the grant", "amend-widens",
		am("alice", g1, 1, cpu(100_000_000)), am("alice", g1, 2, cpu(200_000_000)))
	add("amend-widens-expiry", "a later exp", "amend-widens", am("alice", g1, 1, func(a *jcp.Amendment) { a.Exp++ }))
	add("amend-widens-hosts", "a host outside g1's", "amend-widens", am("alice", g1, 1, func(a *jcp.Amendment) { a.Caveats.Hosts = []string{"api.example.org:443"} }))
	add("amend-stale", "seq 2, then seq 2 again", "amend-stale", am("alice", g1, 2, cpu(200_000_000)), am("alice", g1, 2, cpu(100_000_000)))
	add("amend-stale-lower", "seq 3, then seq 1", "amend-stale", am("alice", g1, 3, cpu(200_000_000)), am("alice", g1, 1, cpu(100_000_000)))
	add("amend-wrong-grant", "an amendment of g0, recorded against g1", "broken-chain", am("root", g0, 1, nil))
	return cs
}

// Ledger lines.

func admitLine(t *jcp.Token) string { return tokenLine("admit", t.Bytes) }

func (b *jcpGen) reserveLine(n int, path []*jcp.Token, uj map[string]uint64, inv string, at time.Time) string {
	return mustLine(map[string]any{"op": "reserve", "n": n, "path": ids(path...), "uj": uj,
		"inv": addr.Of([]byte("jcp vectors: invocation " + inv)).String(), "at": nsText(at), "until": nsText(at.Add(time.Hour))})
}

func postLine(n int, uj map[string]uint64) string {
	return mustLine(map[string]any{"op": "post", "n": n, "uj": uj, "run": addr.Of([]byte(fmt.Sprintf("jcp vectors: run %d", n))).String()})
}

func releaseLine(n int, why string) string {
	return mustLine(map[string]any{"op": "release", "n": n, "why": why})
}

func mintLine(t *jcp.Token, event string, at time.Time) string {
	return mustLine(map[string]any{"op": "mint", "token": b64url.EncodeToString(t.Bytes), "event": event, "at": nsText(at)})
}

func cpuUJ(n uint64) map[string]uint64 { return map[string]uint64{"Cpu": n} }

func (b *jcpGen) at(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }

func (b *jcpGen) revocation(signer string, g *jcp.Token) string {
	return tokenLine("revoke", b.seal(&jcp.Revocation{Grant: g.ID, Iat: b.s}, signer, "revocation").Bytes)
}

// ledgerCases: §7 replayed, and §8 in the ledger.
func (b *jcpGen) ledgerCases() []JCPCase {
	var cs []JCPCase
	add := func(name, about, expect string, lines ...string) {
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseLedger, Ledger: lines, Expect: expect})
	}
	g0, g1, g2 := b.g0, b.g1, b.g2
	base := []string{admitLine(g0), admitLine(g1), admitLine(g2)}
	with := func(lines ...string) []string { return append(slices.Clone(base), lines...) }
	path := []*jcp.Token{g2, g1, g0}
	r := func(n int, uj uint64, inv string, s int) string {
		return b.reserveLine(n, path, cpuUJ(uj), inv, b.at(s))
	}

	add("ledger-ok", "admit the chain; reserve, post; reserve, release", ExpectOK,
		with(r(1, 1_000_000, "1", 0), postLine(1, cpuUJ(900_000)), r(2, 1_000_000, "2", 1), releaseLine(2, "failed"))...)
	add("ledger-post-over-reservation", "a post may exceed its reservation (what the budget watch let through)", ExpectOK,
		with(r(1, 1_000_000, "1", 0), postLine(1, cpuUJ(1_200_000)))...)
	add("ledger-over-ceiling", "two reservations that together pass g2's 100 J", "over-ceiling",
		with(r(1, 60_000_000, "1", 0), r(2, 50_000_000, "2", 1))...)
	add("ledger-over-ceiling-spent", "what was posted counts as spent: 90 J spent, then 20 J more", "over-ceiling",
		with(r(1, 10_000_000, "1", 0), postLine(1, cpuUJ(90_000_000)), r(2, 20_000_000, "2", 1))...)
	sib := b.child(g1, "bob", "mallory", "sibling", func(g *jcp.Grant) {
		g.Images = []addr.Addr{b.im1}
		g.Ceilings = map[device.Class]energy.Microjoules{device.CPU: 450_000_000}
	})
	add("ledger-over-ceiling-shared", "two children of g1, each within its own ceiling, together over g1's 500 J", "over-ceiling",
		with(admitLine(sib), r(1, 100_000_000, "1", 0), b.reserveLine(2, []*jcp.Token{sib, g1, g0}, cpuUJ(400_000_001), "2", b.at(1)))...)
	add("ledger-released-frees", "a released reservation frees its budget", ExpectOK,
		with(r(1, 100_000_000, "1", 0), releaseLine(1, "failed"), r(2, 100_000_000, "2", 1))...)
	add("ledger-double-spend-post", "a reservation posted twice", "double-spend",
		with(r(1, 10, "1", 0), postLine(1, cpuUJ(5)), postLine(1, cpuUJ(5)))...)
	add("ledger-double-spend-release", "a reservation released after it was posted", "double-spend",
		with(r(1, 10, "1", 0), postLine(1, cpuUJ(5)), releaseLine(1, "refused"))...)
	add("ledger-double-spend-never-reserved", "a post of a reservation never made", "double-spend",
		with(r(1, 10, "1", 0), postLine(2, cpuUJ(5)))...)
	add("ledger-replay", "the same invocation reserved twice", "replay", with(r(1, 10, "7", 0), r(2, 10, "7", 1))...)
	add("ledger-n-gap", "reservation numbers that skip", "invalid", with(r(2, 10, "1", 0))...)
	add("ledger-reserve-zero", "a reservation of 0 µJ", "invalid", with(r(1, 0, "1", 0))...)
	add("ledger-path-not-root", "a path that stops before the root", "broken-chain",
		with(b.reserveLine(1, []*jcp.Token{g2, g1}, cpuUJ(10), "1", b.at(0)))...)
	add("ledger-path-root-first", "a path root first", "broken-chain",
		with(b.reserveLine(1, []*jcp.Token{g0, g1, g2}, cpuUJ(10), "1", b.at(0)))...)
	add("ledger-path-unadmitted", "a path through a grant never admitted", "broken-chain",
		admitLine(g0), admitLine(g1), r(1, 10, "1", 0))
	add("ledger-class-not-granted", "a Gpu reservation under g2, which has no Gpu ceiling", "class-not-granted",
		with(b.reserveLine(1, path, map[string]uint64{"Gpu": 1}, "1", b.at(0)))...)
	add("ledger-untrusted-root", "admit a root grant of an untrusted key", "untrusted-root",
		admitLine(b.rootGrant("other", "alice", "other root", nil)))
	add("ledger-admit-orphan", "admit g1 before g0", "broken-chain", admitLine(g1))
	add("ledger-admit-twice", "admit g0 twice", "invalid", admitLine(g0), admitLine(g0))
	add("ledger-admit-widens", "admit a child wider than its parent", "widen-ceiling",
		admitLine(g0), admitLine(b.child(g0, "alice", "bob", "admit wide", func(g *jcp.Grant) { g.Ceilings[device.CPU] *= 2 })))
	add("ledger-admit-wrong-issuer", "admit a child signed by a stranger", "wrong-issuer",
		admitLine(g0), admitLine(b.child(g0, "mallory", "bob", "admit by mallory", nil)))
	add("ledger-admit-no-time", "an expired grant is admitted: the ledger checks no times", ExpectOK,
		admitLine(g0), admitLine(b.child(g0, "alice", "bob", "admit expired", func(g *jcp.Grant) { g.Iat, g.Exp = b.s-1000, b.s-500 })))
	add("ledger-revoked", "g1 revoked by its issuer, then a reservation through it", "revoked",
		with(b.revocation("alice", g1), r(1, 10, "1", 0))...)
	add("ledger-revoked-by-ancestor", "g2 revoked by the root, the issuer of an ancestor", "revoked",
		with(b.revocation("root", g2), r(1, 10, "1", 0))...)
	add("ledger-revoke-leaf-only", "g2 revoked; a reservation whose path stops at g1 is not", ExpectOK,
		with(b.revocation("bob", g2), b.reserveLine(1, []*jcp.Token{g1, g0}, cpuUJ(10), "1", b.at(0)))...)
	add("ledger-revoke-wrong-issuer", "g1 revoked by its audience (bob), who issued only g2", "wrong-issuer", with(b.revocation("bob", g1))...)
	add("ledger-revoke-unadmitted", "a revocation of a grant never admitted", "broken-chain",
		admitLine(g0), b.revocation("alice", g1))
	add("ledger-revoked-before-replay", "a replayed invocation through a revoked grant: revoked first", "revoked",
		with(r(1, 10, "1", 0), b.revocation("alice", g1), r(2, 10, "1", 1))...)

	// runs and rate
	g2r := b.child(g1, "bob", "carol", "runs 2", func(g *jcp.Grant) {
		g.Images = []addr.Addr{b.im1}
		g.Ceilings = map[device.Class]energy.Microjoules{device.CPU: 100_000_000}
		g.Caveats.Runs = 2
	})
	pr := []*jcp.Token{g2r, g1, g0}
	rr := func(n int, inv string, s int) string { return b.reserveLine(n, pr, cpuUJ(1), inv, b.at(s)) }
	runsBase := []string{admitLine(g0), admitLine(g1), admitLine(g2r)}
	add("ledger-runs-exhausted", "a third run under runs 2", "runs-exhausted",
		append(slices.Clone(runsBase), rr(1, "1", 0), rr(2, "2", 1000), rr(3, "3", 2000))...)
	add("ledger-runs-refused-uncounted", "a reservation released as refused does not count", ExpectOK,
		append(slices.Clone(runsBase), rr(1, "1", 0), releaseLine(1, "refused"), rr(2, "2", 1000), rr(3, "3", 2000))...)
	add("ledger-runs-failed-counted", "a reservation released as failed still counts", "runs-exhausted",
		append(slices.Clone(runsBase), rr(1, "1", 0), releaseLine(1, "failed"), rr(2, "2", 1000), rr(3, "3", 2000))...)
	five := []string{}
	for i := 1; i <= 5; i++ {
		five = append(five, r(i, 1, fmt.Sprint(i), 10*i))
	}
	add("ledger-rate-exceeded", "a sixth run within g1's 120 s (rate 5 per 120 s)", "rate-exceeded",
		with(append(slices.Clone(five), r(6, 1, "6", 100))...)...)
	add("ledger-rate-window", "a sixth run 120 s after the first: the first is out of (at − 120 s, …]", ExpectOK,
		with(append(slices.Clone(five), r(6, 1, "6", 130))...)...)
	late := []string{}
	for i := 1; i <= 5; i++ {
		late = append(late, r(i, 1, fmt.Sprint(i), 200+i))
	}
	add("ledger-rate-clock-back", "five runs at now + 201…205 s, a sixth at now (the clock stepped back): only those in (at − 120 s, at] count", ExpectOK,
		with(append(late, r(6, 1, "6", 0))...)...)

	// amendments, checkpoints
	amendLine := func(signer string, seq uint64, uj energy.Microjoules) string {
		p := g1.Grant
		a := &jcp.Amendment{Grant: g1.ID, Seq: seq, Iat: b.s, Exp: p.Exp, Images: slices.Clone(p.Images),
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: uj}, Caveats: cloneCaveats(p.Caveats)}
		return tokenLine("amend", b.seal(a, signer, "amendment").Bytes)
	}
	add("ledger-amend-lowers", "g1's Cpu lowered to 1 J: a 2 J reservation is over", "over-ceiling",
		with(amendLine("alice", 1, 1_000_000), r(1, 2_000_000, "1", 0))...)
	add("ledger-amend-drops-class", "g1's Gpu ceiling dropped: a Gpu reservation at g1 is class-not-granted", "class-not-granted",
		with(amendLine("alice", 1, 1_000_000), b.reserveLine(1, []*jcp.Token{g1, g0}, map[string]uint64{"Gpu": 1}, "1", b.at(0)))...)
	add("ledger-amend-not-issuer", "g1 amended by its audience", "amend-not-issuer", with(amendLine("bob", 1, 1_000_000))...)
	add("ledger-amend-stale", "seq 1 twice", "amend-stale", with(amendLine("alice", 1, 2_000_000), amendLine("alice", 1, 1_000_000))...)
	add("ledger-amend-widens", "an amendment raising g1's Cpu", "amend-widens", with(amendLine("alice", 1, 900_000_000))...)
	cp := func(signer string, g *jcp.Token, seq uint64) string {
		c := &jcp.Checkpoint{Grant: g.ID, Run: addr.Of([]byte(fmt.Sprintf("jcp vectors: checkpointed run %d", seq))), Seq: seq, Iat: b.s}
		return tokenLine("checkpoint", b.seal(c, signer, "checkpoint").Bytes)
	}
	add("ledger-checkpoint", "checkpoints 1 and 2 by g2's audience", ExpectOK, with(cp("carol", g2, 1), cp("carol", g2, 2))...)
	add("ledger-checkpoint-audience", "a checkpoint by g2's issuer", "wrong-audience", with(cp("bob", g2, 1))...)
	add("ledger-checkpoint-seq", "checkpoint 2, then 1", "invalid", with(cp("carol", g2, 2), cp("carol", g2, 1))...)

	// the lines themselves
	good := r(1, 10, "1", 0)
	add("ledger-line-whitespace", "a space after a colon", "non-canonical", with(strings.Replace(good, `":`, `": `, 1))...)
	add("ledger-line-duplicate", "a member twice", "duplicate-key", with(`{"n":1,"n":1,"op":"release","why":"failed"}`)...)
	add("ledger-line-float", "a reservation number 1.0", "float", with(`{"n":1.0,"op":"release","why":"failed"}`)...)
	add("ledger-line-int-range", "a µJ figure of 2^53", "int-range", with(strings.Replace(r(1, 7777, "1", 0), ":7777}", ":9007199254740992}", 1))...)
	add("ledger-line-malformed", "not JSON", "malformed", with("{op}")...)
	add("ledger-line-unknown-op", "the op delete", "invalid", with(mustLine(map[string]any{"op": "delete"}))...)
	add("ledger-line-unknown-field", "a reserve with a member zzz", "unknown-field", with(good[:len(good)-1]+`,"zzz":1}`)...)
	add("ledger-line-missing-field", "a release without why", "missing-field", with(mustLine(map[string]any{"op": "release", "n": 1}))...)
	add("ledger-ns-number", "at as a JSON number: times in ns are decimal strings", "invalid",
		with(strings.Replace(good, `"at":"`+nsText(b.at(0))+`"`, `"at":`+fmt.Sprint(b.s), 1))...)
	add("ledger-token-kind", "admit an invocation", "invalid", with(admitLine(b.invocation("carol", g2, "admitted invocation", nil)))...)
	flipped := bytes.Clone(g1.Bytes)
	flipped[len(flipped)-1] ^= 1
	add("ledger-token-signature", "admit g1 with a flipped signature", "signature", admitLine(g0), tokenLine("admit", flipped))
	return cs
}

// The standing grant of standing.json: alice, g0's audience, lets the
// host mint children of g0 for bob on events.
func (b *jcpGen) policy(signer, label string, edit func(*jcp.Policy)) *jcp.Token {
	p := &jcp.Policy{
		Grant: b.g0.ID, Minter: b.pub("host"), To: b.pub("bob"),
		Template: jcp.Template{TTL: 3600, Depth: 2, Images: []addr.Addr{b.im1},
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: 100_000_000},
			Caveats: jcp.Caveats{Models: []string{"llama-3-8b"}, Tiers: []string{"S1"}, Hosts: []string{"*.example.com:443"},
				Paths: []string{"/data"}, Runs: 10, Rate: &jcp.Rate{N: 5, Per: 60}}},
		Max: 3, Rate: jcp.Rate{N: 2, Per: 60}, Events: []string{"event:deploy", "every:3600", "pool-claim:warm"},
		Iat: b.s - 60, Exp: b.g0.Grant.Exp - 30,
	}
	if edit != nil {
		edit(p)
	}
	return b.seal(p, signer, label)
}

// minted is a child of g0 minted under pol at iat (Unix seconds): the
// template's terms, living its ttl, then edit.
func (b *jcpGen) minted(pol *jcp.Token, iat uint64, label string, edit func(*jcp.Grant)) *jcp.Token {
	tm := pol.Policy.Template
	parent, pid := pol.Policy.Grant, pol.ID
	g := &jcp.Grant{Aud: pol.Policy.To, Parent: &parent, Policy: &pid, Iat: iat, Exp: iat + tm.TTL, Depth: tm.Depth,
		Images: slices.Clone(tm.Images), Ceilings: maps.Clone(tm.Ceilings), Caveats: cloneCaveats(tm.Caveats)}
	if edit != nil {
		edit(g)
	}
	return b.seal(g, "host", label)
}

// standingCases: standing.json, §6 in chains and in the ledger.
func (b *jcpGen) standingCases() []JCPCase {
	var cs []JCPCase
	chain := func(name, about, expect string, ts ...*jcp.Token) {
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseMint, Chain: chainOf(ts...), Expect: expect})
	}
	ledger := func(name, about, expect string, lines ...string) {
		cs = append(cs, JCPCase{Name: name, About: about, Kind: CaseLedger, Ledger: lines, Expect: expect})
	}
	g0, g1 := b.g0, b.g1
	p0 := b.policy("alice", "p0", nil)
	c1 := b.minted(p0, b.s-10, "c1", nil)
	mint := func(label string, edit func(*jcp.Grant)) *jcp.Token { return b.minted(p0, b.s-10, label, edit) }
	byAlice := func() *jcp.Token {
		tm := p0.Policy.Template
		parent, pid := g0.ID, p0.ID
		g := &jcp.Grant{Aud: b.pub("bob"), Parent: &parent, Policy: &pid, Iat: b.s - 10, Exp: b.s - 10 + tm.TTL, Depth: tm.Depth,
			Images: tm.Images, Ceilings: tm.Ceilings, Caveats: tm.Caveats}
		return b.seal(g, "alice", "minted by alice")
	}

	chain("mint-ok", "a child the host minted under alice's policy, within its template", ExpectOK, g0, p0, c1)
	chain("mint-narrower", "a child narrower than the template: 10 µJ, depth 0, 60 s", ExpectOK, g0, p0, mint("narrower", func(g *jcp.Grant) {
		g.Ceilings[device.CPU], g.Depth, g.Exp = 10, 0, g.Iat+60
	}))
	chain("mint-then-delegate", "the minted child's audience delegates it on", ExpectOK, g0, p0, c1,
		b.child(c1, "bob", "carol", "below c1", nil))
	chain("mint-widen-ceiling", "a child 1 µJ above the template's Cpu", "widen-ceiling", g0, p0, mint("wide cpu", func(g *jcp.Grant) { g.Ceilings[device.CPU]++ }))
	chain("mint-widen-class", "a child with a Gpu ceiling the template does not give", "widen-ceiling", g0, p0, mint("wide gpu", func(g *jcp.Grant) { g.Ceilings[device.GPU] = 1 }))
	chain("mint-widen-expiry", "a child living 1 s past iat + ttl", "widen-expiry", g0, p0, mint("wide exp", func(g *jcp.Grant) { g.Exp++ }))
	chain("mint-widen-depth", "a child deeper than the template's 2 (at most the template's depth, not one less)", "widen-depth", g0, p0,
		mint("wide depth", func(g *jcp.Grant) { g.Depth = 3 }))
	chain("mint-widen-images", "a child with an image the template lacks", "widen-images", g0, p0, mint("wide images", func(g *jcp.Grant) {
		g.Images = sortAddrs(b.im1, b.im2)
	}))
	chain("mint-widen-tiers", "a child without the template's tiers", "widen-tiers", g0, p0, mint("no tiers", func(g *jcp.Grant) { g.Caveats.Tiers = nil }))
	chain("mint-widen-rate", "a child rate above the template's", "widen-rate", g0, p0, mint("wide rate", func(g *jcp.Grant) { g.Caveats.Rate = &jcp.Rate{N: 6, Per: 60} }))
	chain("mint-wrong-issuer", "a child signed by the holder (alice), not the minter", "wrong-issuer", g0, p0, byAlice())
	chain("mint-wrong-audience", "a child for carol; the policy mints for bob", "wrong-audience", g0, p0, mint("for carol", func(g *jcp.Grant) { g.Aud = b.pub("carol") }))
	px := b.policy("mallory", "p by mallory", nil)
	chain("mint-policy-wrong-issuer", "a policy signed by mallory, not g0's audience", "wrong-issuer", g0, px, b.minted(px, b.s-10, "under px", nil))
	pw := b.policy("alice", "p wide", func(p *jcp.Policy) {
		p.Template.Ceilings = map[device.Class]energy.Microjoules{device.CPU: 2_000_000_000}
	})
	chain("mint-template-widens", "a template above g0's Cpu ceiling", "widen-ceiling", g0, pw, b.minted(pw, b.s-10, "under pw", func(g *jcp.Grant) {
		g.Ceilings[device.CPU] = 1
	}))
	pd := b.policy("alice", "p deep", func(p *jcp.Policy) { p.Template.Depth = 8 })
	chain("mint-template-depth", "a template as deep as g0 (8): at most 7", "widen-depth", g0, pd, b.minted(pd, b.s-10, "under pd", func(g *jcp.Grant) { g.Depth = 0 }))
	pl := b.policy("alice", "p late", func(p *jcp.Policy) { p.Exp = g0.Grant.Exp + 1 })
	chain("mint-policy-outlives", "a policy expiring after the grant it holds", "widen-expiry", g0, pl, b.minted(pl, b.s-10, "under pl", nil))
	chain("mint-policy-first", "a chain that starts with a policy", "invalid", p0, c1)
	chain("mint-policy-last", "a chain that ends with a policy", "broken-chain", g0, p0)
	chain("mint-policy-twice", "a policy after a policy", "invalid", g0, p0, p0, c1)
	chain("mint-policy-not-before", "a minted child with no policy before it", "broken-chain", g0, c1)
	chain("mint-policy-unused", "a policy before a grant not minted under it", "broken-chain", g0, p0, g1)
	po := b.policy("alice", "p other", nil)
	chain("mint-policy-other", "a minted child citing another policy than the one before it", "broken-chain", g0, po, c1)
	pg1 := b.policy("bob", "p of g1", func(p *jcp.Policy) { p.Grant = g1.ID; p.To = b.pub("carol") })
	chain("mint-policy-holds-another", "a policy holding g1, standing after g0", "broken-chain", g0, pg1, b.minted(pg1, b.s-10, "under pg1", func(g *jcp.Grant) {
		g.Parent = &g0.ID
	}))
	pe := b.policy("alice", "p expired", func(p *jcp.Policy) { p.Iat, p.Exp = b.s-100, b.s })
	chain("mint-policy-expired", "a policy that expired at now", "expired", g0, pe, b.minted(pe, b.s-100, "under pe", func(g *jcp.Grant) { g.Exp = b.s }))
	// A policy Seal would refuse: p0's payload changed and signed again.
	rawPolicy := func(label string, edit func(m map[string]any)) *jcp.Token {
		raw := b.edited(p0, "alice", func(m map[string]any) {
			m["nonce"] = nonceOf(label)
			edit(m)
		})
		t := *p0
		t.ID, t.Bytes = addr.Of(raw), raw
		return &t
	}
	for _, bad := range []struct{ name, event string }{{"cron", "cron:5"}, {"every-zero", "every:0"}, {"every-text", "every:hour"}, {"no-name", "event:"}} {
		pb := rawPolicy("p "+bad.name, func(m map[string]any) { m["events"] = []any{bad.event} })
		chain("mint-policy-event-"+bad.name, "a policy event "+bad.event+": not event:NAME, pool-claim:POOL or every:SECONDS", "invalid",
			g0, pb, b.minted(pb, b.s-10, "under "+bad.name, nil))
	}
	pm := rawPolicy("p max 0", func(m map[string]any) { m["max"] = uint64(0) })
	chain("mint-policy-max-zero", "a policy that may mint nothing (max 0)", "invalid", g0, pm, b.minted(pm, b.s-10, "under pm", nil))
	pv := rawPolicy("p no events", func(m map[string]any) { m["events"] = []any{} })
	chain("mint-policy-no-events", "a policy with no events: it could never mint", "invalid", g0, pv, b.minted(pv, b.s-10, "under pv", nil))
	pt := rawPolicy("p template empty", func(m map[string]any) { m["template"].(map[any]any)["caveats"].(map[any]any)["models"] = []any{} })
	chain("mint-template-empty-caveat", "a template caveat written as the empty set", "non-canonical", g0, pt, b.minted(pt, b.s-10, "under pt", nil))
	pn := rawPolicy("p template no ttl", func(m map[string]any) { delete(m["template"].(map[any]any), "ttl") })
	chain("mint-template-missing-ttl", "a template without its ttl: every template member is required", "missing-field", g0, pn, b.minted(pn, b.s-10, "under pn", nil))

	// In the ledger: max, rate and events, counted in its order.
	base := []string{admitLine(g0), admitLine(p0)}
	with := func(lines ...string) []string { return append(slices.Clone(base), lines...) }
	ms := make([]*jcp.Token, 5)
	for i := range ms {
		ms[i] = b.minted(p0, b.s+uint64(100*i), fmt.Sprintf("mint %d", i), nil)
	}
	ml := func(i, s int) string { return mintLine(ms[i], "event:deploy", b.at(s)) }
	ledger("standing-mint-ok", "a mint on event:deploy, then a run reserved under the minted grant", ExpectOK,
		with(ml(0, 0), b.reserveLine(1, []*jcp.Token{ms[0], g0}, cpuUJ(1_000_000), "s1", b.at(1)))...)
	ledger("standing-mint-schedule", "a mint on every:3600, one of the policy's events", ExpectOK, with(mintLine(ms[0], "every:3600", b.at(0)))...)
	ledger("standing-max", "a fourth mint under max 3", "runs-exhausted", with(ml(0, 0), ml(1, 100), ml(2, 200), ml(3, 300))...)
	ledger("standing-max-admitted", "two children admitted (not minted) count toward max 3: the fourth child is refused", "runs-exhausted",
		with(admitLine(ms[0]), admitLine(ms[1]), ml(2, 200), ml(3, 300))...)
	ledger("standing-rate", "a third mint within 60 s (rate 2 per 60 s)", "rate-exceeded", with(ml(0, 0), ml(1, 10), ml(2, 20))...)
	ledger("standing-rate-window", "mints at now, +30 s and +60 s: the first is out of (at − 60 s, …]", ExpectOK, with(ml(0, 0), ml(1, 30), ml(2, 60))...)
	ledger("standing-admitted-not-rated", "two children admitted in the same second, then a mint: admits count toward max, not rate", ExpectOK,
		with(admitLine(ms[0]), admitLine(ms[1]), ml(2, 0))...)
	ledger("standing-event", "a mint on an event the policy does not name", "invalid", with(mintLine(ms[0], "event:other", b.at(0)))...)
	ledger("standing-mint-not-minted", "a mint entry carrying a grant that names no policy", "broken-chain", with(mintLine(g1, "event:deploy", b.at(0)))...)
	ledger("standing-mint-unadmitted-policy", "a mint under a policy never admitted", "broken-chain", admitLine(g0), ml(0, 0))
	ledger("standing-mint-twice", "the same child minted twice", "invalid", with(ml(0, 0), ml(0, 100))...)
	ledger("standing-mint-revoked", "g0 revoked by the root, then a mint under a policy holding it", "revoked", with(b.revocation("root", g0), ml(0, 0))...)
	revokeP0 := func(signer string) string {
		return tokenLine("revoke", b.seal(&jcp.Revocation{Grant: p0.ID, Iat: b.s}, signer, "revoke policy").Bytes)
	}
	ledger("standing-revoke-policy", "the holder (alice) revokes its policy", ExpectOK, with(revokeP0("alice"))...)
	ledger("standing-revoke-policy-by-root", "the issuer of the grant it holds revokes the policy", ExpectOK, with(revokeP0("root"))...)
	ledger("standing-revoke-policy-wrong-issuer", "the policy's audience (bob) revokes it", "wrong-issuer", with(revokeP0("bob"))...)
	ledger("standing-mint-revoked-policy", "a mint under a revoked policy", "revoked", with(revokeP0("alice"), ml(0, 0))...)
	ledger("standing-minted-revoked-policy", "a reservation under a child minted before its policy was revoked", "revoked",
		with(ml(0, 0), revokeP0("alice"), b.reserveLine(1, []*jcp.Token{ms[0], g0}, cpuUJ(1), "s1", b.at(1)))...)
	ledger("standing-mint-wrong-audience", "a mint for carol", "wrong-audience",
		with(mintLine(b.minted(p0, b.s, "ledger for carol", func(g *jcp.Grant) { g.Aud = b.pub("carol") }), "event:deploy", b.at(0)))...)
	ledger("standing-mint-over-template", "a mint above the template's Cpu", "widen-ceiling",
		with(mintLine(b.minted(p0, b.s, "ledger wide", func(g *jcp.Grant) { g.Ceilings[device.CPU]++ }), "event:deploy", b.at(0)))...)
	ledger("standing-mint-ceiling", "the minted grant's 100 J holds: 100 J reserved, then 1 µJ more", "over-ceiling",
		with(ml(0, 0), b.reserveLine(1, []*jcp.Token{ms[0], g0}, cpuUJ(100_000_000), "s1", b.at(1)),
			b.reserveLine(2, []*jcp.Token{ms[0], g0}, cpuUJ(1), "s2", b.at(2)))...)
	ledger("standing-policy-wrong-issuer", "admit a policy signed by mallory", "wrong-issuer", admitLine(g0), admitLine(px))
	ledger("standing-policy-widens", "admit a policy whose template is above g0's Cpu", "widen-ceiling", admitLine(g0), admitLine(pw))
	ledger("standing-policy-unadmitted-grant", "admit a policy before the grant it holds", "broken-chain", admitLine(pw))
	return cs
}
