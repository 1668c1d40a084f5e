package jcp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

var now = time.Unix(1_800_000_000, 0)

func principal(t testing.TB, n byte) key.Private {
	t.Helper()
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	img1 = addr.Of([]byte("image one"))
	img2 = addr.Of([]byte("image two"))
)

func images(as ...addr.Addr) []addr.Addr {
	out := append([]addr.Addr(nil), as...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if bytes.Compare(out[j][:], out[i][:]) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// root is a root grant from k1 to k2: two images, 100 J of CPU and 10 J of
// GPU, depth 3, every caveat.
func root(t testing.TB) *Grant {
	return &Grant{
		Aud: principal(t, 2).Public(), Iat: uint64(now.Unix()) - 60, Exp: uint64(now.Unix()) + 3600, Depth: 3,
		Images:   images(img1, img2),
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 100e6, device.GPU: 10e6},
		Caveats: Caveats{Models: []string{"llama-3-8b", "qwen-7b"}, Tiers: []string{"S1", "S2", "S5"},
			Hosts: []string{"*.example.com:443", "10.0.0.0/8"}, Paths: []string{"/data", "/srv"}, Runs: 100, Rate: &Rate{N: 60, Per: 60}},
	}
}

// child is g narrowed by one step, from its audience (k) to to.
func child(parent *Token, to key.Public, edit func(*Grant)) *Grant {
	p := parent.Grant
	g := &Grant{Aud: to, Parent: &parent.ID, Iat: p.Iat, Exp: p.Exp - 60, Depth: p.Depth - 1, Images: p.Images,
		Ceilings: map[device.Class]energy.Microjoules{}, Caveats: p.Caveats}
	for c, v := range p.Ceilings {
		g.Ceilings[c] = v / 2
	}
	if edit != nil {
		edit(g)
	}
	return g
}

func seal(t testing.TB, v any, k key.Private) *Token {
	t.Helper()
	tok, err := Seal(v, k)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func codeOf(err error) reject.Code {
	var re *reject.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

func roots(t testing.TB) key.Trust { return key.NewTrust(principal(t, 1).Public()) }

func TestChainVerifies(t *testing.T) {
	k1, k2, k3, k4 := principal(t, 1), principal(t, 2), principal(t, 3), principal(t, 4)
	g0 := seal(t, root(t), k1)
	g1 := seal(t, child(g0, k3.Public(), nil), k2)
	g2 := seal(t, child(g1, k4.Public(), nil), k3)
	c, err := Verify([][]byte{g0.Bytes, g1.Bytes, g2.Bytes}, roots(t), now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf().ID != g2.ID || len(c.Path()) != 3 || c.Path()[2] != g0.ID {
		t.Fatalf("chain %v", c.IDs())
	}
	inv := seal(t, &Invocation{Grant: g2.ID, Image: &img1, Model: "qwen-7b", Iat: uint64(now.Unix())}, k4)
	if err := Present(c, inv, now); err != nil {
		t.Fatal(err)
	}
	ask := Ask{Image: img1, Model: "qwen-7b", Tier: tier.S1, Classes: []device.Class{device.CPU},
		Budgets: map[device.Class]energy.Microjoules{device.CPU: 1e6}, Hosts: []Dest{{"api.example.com", 443}, {"10.1.2.3", 80}}, Paths: []string{"/data/x"}}
	for i, g := range c.Grants {
		if err := Admit(g.Grant.Terms(), ask, "g."); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
	}
}

func TestEveryWideningHasItsCode(t *testing.T) {
	k1, k2, k3 := principal(t, 1), principal(t, 2), principal(t, 3)
	g0 := seal(t, root(t), k1)
	for _, tc := range []struct {
		code reject.Code
		edit func(*Grant)
	}{
		{reject.WidenDepth, func(g *Grant) { g.Depth = 3 }},
		{reject.WidenImages, func(g *Grant) { g.Images = images(img1, addr.Of([]byte("other"))) }},
		{reject.WidenCeiling, func(g *Grant) { g.Ceilings[device.CPU] = 100e6 + 1 }},
		{reject.WidenCeiling, func(g *Grant) { g.Ceilings[device.NPU] = 1 }},
		{reject.WidenExpiry, func(g *Grant) { g.Exp = g0.Grant.Exp + 1 }},
		{reject.WidenModels, func(g *Grant) { g.Caveats.Models = []string{"gpt-5"} }},
		{reject.WidenModels, func(g *Grant) { g.Caveats.Models = nil }},
		{reject.WidenTiers, func(g *Grant) { g.Caveats.Tiers = []string{"S0", "S1"} }},
		{reject.WidenHosts, func(g *Grant) { g.Caveats.Hosts = []string{"*.com:443"} }},
		{reject.WidenHosts, func(g *Grant) { g.Caveats.Hosts = []string{"api.example.com"} }}, // any port under a :443 parent
		{reject.WidenHosts, func(g *Grant) { g.Caveats.Hosts = []string{"10.0.0.0/7"} }},
		{reject.WidenPaths, func(g *Grant) { g.Caveats.Paths = []string{"/dat"} }},
		{reject.WidenPaths, func(g *Grant) { g.Caveats.Paths = nil }},
		{reject.WidenRuns, func(g *Grant) { g.Caveats.Runs = 101 }},
		{reject.WidenRuns, func(g *Grant) { g.Caveats.Runs = 0 }},
		{reject.WidenRate, func(g *Grant) { g.Caveats.Rate = &Rate{N: 61, Per: 60} }},
		{reject.WidenRate, func(g *Grant) { g.Caveats.Rate = &Rate{N: 60, Per: 59} }},
	} {
		t.Run(string(tc.code), func(t *testing.T) {
			g1 := seal(t, child(g0, k3.Public(), tc.edit), k2)
			_, err := Verify([][]byte{g0.Bytes, g1.Bytes}, roots(t), now)
			if codeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
	// Narrowing every term at once passes.
	g1 := seal(t, child(g0, k3.Public(), func(g *Grant) {
		g.Images = []addr.Addr{img2}
		g.Caveats = Caveats{Models: []string{"qwen-7b"}, Tiers: []string{"S2"}, Hosts: []string{"10.1.0.0/16", "api.example.com:443"},
			Paths: []string{"/data/a"}, Runs: 5, Rate: &Rate{N: 1, Per: 3600}}
	}), k2)
	if _, err := Verify([][]byte{g0.Bytes, g1.Bytes}, roots(t), now); err != nil {
		t.Fatal(err)
	}
}

func TestChainRefusals(t *testing.T) {
	k1, k2, k3, k4 := principal(t, 1), principal(t, 2), principal(t, 3), principal(t, 4)
	g0 := seal(t, root(t), k1)
	g1 := seal(t, child(g0, k3.Public(), nil), k2)
	byK4 := seal(t, child(g0, k3.Public(), nil), k4)
	rootByK2 := seal(t, root(t), k2)
	expired := seal(t, child(g0, k3.Public(), func(g *Grant) { g.Exp = uint64(now.Unix()) }), k2)
	future := seal(t, child(g0, k3.Public(), func(g *Grant) { g.Iat = uint64(now.Unix()) + 301 }), k2)
	zero := root(t)
	zero.Depth = 0
	z0 := seal(t, zero, k1)
	below0 := seal(t, child(z0, k3.Public(), func(g *Grant) { g.Depth = 0 }), k2)
	long := [][]byte{g0.Bytes}
	for len(long) < MaxDepth+1 {
		long = append(long, g1.Bytes)
	}
	for _, tc := range []struct {
		name  string
		chain [][]byte
		code  reject.Code
	}{
		{"empty", nil, reject.ChainDepth},
		{"65 elements", long, reject.ChainDepth},
		{"untrusted root", [][]byte{rootByK2.Bytes}, reject.UntrustedRoot},
		{"root with a parent", [][]byte{g1.Bytes}, reject.BrokenChain},
		{"the same grant twice (a loop)", [][]byte{g0.Bytes, g1.Bytes, g1.Bytes}, reject.BrokenChain},
		{"not the parent's audience", [][]byte{g0.Bytes, byK4.Bytes}, reject.WrongIssuer},
		{"expired", [][]byte{g0.Bytes, expired.Bytes}, reject.Expired},
		{"issued in the future", [][]byte{g0.Bytes, future.Bytes}, reject.NotYet},
		{"below depth 0", [][]byte{z0.Bytes, below0.Bytes}, reject.DepthExhausted},
		{"garbage", [][]byte{[]byte("not cbor")}, reject.Truncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.chain, roots(t), now)
			if codeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
}

// resign seals a payload as given, bypassing Seal's checks.
func resign(t testing.TB, payload []byte, k key.Private) []byte {
	b, err := receipt.SealAs(payload, k, TypeGrant)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHostileTokens(t *testing.T) {
	k1 := principal(t, 1)
	g0 := seal(t, root(t), k1)
	payload := func(edit func(m map[string]any)) []byte {
		var m map[string]any
		if err := detcbor.Unmarshal(mustPayload(t, g0.Bytes), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, err := detcbor.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	flipped := bytes.Clone(g0.Bytes)
	flipped[len(flipped)-1] ^= 1
	weak := make([]byte, 32) // the identity point's encoding is 01 00 … 00
	weak[0] = 1
	for _, tc := range []struct {
		name string
		b    []byte
		code reject.Code
	}{
		{"unknown critical caveat", resign(t, payload(func(m map[string]any) {
			m["caveats"].(map[any]any)["gpu-model"] = "H100"
		}), k1), reject.UnknownCritical},
		{"unknown member", resign(t, payload(func(m map[string]any) { m["admin"] = true }), k1), reject.UnknownField},
		{"missing exp", resign(t, payload(func(m map[string]any) { delete(m, "exp") }), k1), reject.MissingField},
		{"empty models", resign(t, payload(func(m map[string]any) { m["caveats"].(map[any]any)["models"] = []any{} }), k1), reject.NonCanonical},
		{"runs 0", resign(t, payload(func(m map[string]any) { m["caveats"].(map[any]any)["runs"] = uint64(0) }), k1), reject.NonCanonical},
		{"rate without n", resign(t, payload(func(m map[string]any) {
			m["caveats"].(map[any]any)["rate"] = map[string]any{"per": uint64(60)}
		}), k1), reject.MissingField},
		{"images unsorted", resign(t, payload(func(m map[string]any) {
			im := m["images"].([]any)
			im[0], im[1] = im[1], im[0]
		}), k1), reject.NonCanonical},
		{"tiers repeated", resign(t, payload(func(m map[string]any) {
			m["caveats"].(map[any]any)["tiers"] = []any{"S1", "S1"}
		}), k1), reject.NonCanonical},
		{"an all-zero parent", resign(t, payload(func(m map[string]any) { m["parent"] = make([]byte, 32) }), k1), reject.NonCanonical},
		{"an all-zero image", resign(t, payload(func(m map[string]any) { m["images"].([]any)[0] = make([]byte, 32) }), k1), reject.MissingField},
		{"a 15-byte nonce", resign(t, payload(func(m map[string]any) { m["nonce"] = make([]byte, 15) }), k1), reject.Invalid},
		{"a 31-byte aud", resign(t, payload(func(m map[string]any) { m["aud"] = make([]byte, 31) }), k1), reject.Invalid},
		{"depth written null", resign(t, payload(func(m map[string]any) { m["depth"] = nil }), k1), reject.Invalid},
		{"parent written null", resign(t, payload(func(m map[string]any) { m["parent"] = nil }), k1), reject.NonCanonical},
		{"models written null", resign(t, payload(func(m map[string]any) { m["caveats"].(map[any]any)["models"] = nil }), k1), reject.NonCanonical},
		{"depth as text", resign(t, payload(func(m map[string]any) { m["depth"] = "3" }), k1), reject.Invalid},
		{"a tagged iat", resign(t, payload(func(m map[string]any) { m["iat"] = cbor.Tag{Number: 1, Content: m["iat"]} }), k1), reject.NonCanonical},
		{"a value rule broken under a bad signature: the signature first", func() []byte {
			b := resign(t, payload(func(m map[string]any) { m["v"] = uint64(2) }), k1)
			b[len(b)-1] ^= 1
			return b
		}(), reject.Signature},
		{"unknown class", resign(t, payload(func(m map[string]any) { m["ceilings"].(map[any]any)["Fpga"] = uint64(1) }), k1), reject.Invalid},
		{"exp before iat", resign(t, payload(func(m map[string]any) { m["exp"] = uint64(1) }), k1), reject.Invalid},
		{"flipped signature", flipped, reject.Signature},
		{"signed by another key", resign(t, mustPayload(t, g0.Bytes), principal(t, 9)), reject.Header},
		{"weak issuer key", func() []byte {
			b := payload(func(m map[string]any) { m["iss"] = weak })
			var wk key.Public
			copy(wk[:], weak)
			id := wk.ID()
			out, err := receipt.SealPayload(b, k1, receipt.AlgEdDSA, map[int64]any{3: TypeGrant, 4: id[:]})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}(), reject.WeakKey},
		{"too big", make([]byte, MaxToken+1), reject.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.b)
			if codeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if err != nil && !strings.Contains(err.Error(), ":") {
				t.Fatalf("an error that names no place: %v", err)
			}
		})
	}
}

func mustPayload(t testing.TB, b []byte) []byte {
	env, err := receipt.OpenEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	return env.Payload
}

func TestAdmitRefusals(t *testing.T) {
	g := root(t)
	base := Ask{Image: img1, Model: "qwen-7b", Tier: tier.S2, Classes: []device.Class{device.CPU}, Budgets: map[device.Class]energy.Microjoules{device.CPU: 1}}
	for _, tc := range []struct {
		code reject.Code
		edit func(*Ask)
	}{
		{"", func(*Ask) {}},
		{reject.ImageNotGranted, func(a *Ask) { a.Image = addr.Of([]byte("x")) }},
		{reject.ModelNotGranted, func(a *Ask) { a.Model = "gpt-5" }},
		{reject.ModelNotGranted, func(a *Ask) { a.Model = "" }},
		{reject.TierNotGranted, func(a *Ask) { a.Tier = tier.S0 }},
		{reject.HostNotGranted, func(a *Ask) { a.Hosts = []Dest{{"api.example.com", 80}} }},
		{reject.HostNotGranted, func(a *Ask) { a.Hosts = []Dest{{"example.com", 443}} }},
		{reject.HostNotGranted, func(a *Ask) { a.Hosts = []Dest{{"11.0.0.1", 443}} }},
		{reject.PathNotGranted, func(a *Ask) { a.Paths = []string{"/database"} }},
		{reject.ClassNotGranted, func(a *Ask) { a.Classes = append(a.Classes, device.NPU) }},
		{reject.CeilingUndeclared, func(a *Ask) { a.Budgets = nil }},
	} {
		a := base
		tc.edit(&a)
		if err := Admit(g.Terms(), a, ""); codeOf(err) != tc.code {
			t.Errorf("%s: got %v", tc.code, err)
		}
	}
}

func TestPresent(t *testing.T) {
	k1, k2, k3 := principal(t, 1), principal(t, 2), principal(t, 3)
	g0 := seal(t, root(t), k1)
	c, err := Verify([][]byte{g0.Bytes}, roots(t), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code reject.Code
		inv  *Invocation
		by   key.Private
	}{
		{"", &Invocation{Grant: g0.ID, Image: &img1, Iat: uint64(now.Unix())}, k2},
		{reject.WrongAudience, &Invocation{Grant: g0.ID, Image: &img1, Iat: uint64(now.Unix())}, k3},
		{reject.BrokenChain, &Invocation{Grant: img1, Image: &img1, Iat: uint64(now.Unix())}, k2},
		{reject.StaleInvocation, &Invocation{Grant: g0.ID, Image: &img1, Iat: uint64(now.Unix()) - 301}, k2},
		{reject.StaleInvocation, &Invocation{Grant: g0.ID, Image: &img1, Iat: uint64(now.Unix()) + 301}, k2},
	} {
		if err := Present(c, seal(t, tc.inv, tc.by), now); codeOf(err) != tc.code {
			t.Errorf("%s: got %v", tc.code, err)
		}
	}
}

func TestMintedUnderPolicy(t *testing.T) {
	k1, k2, host, k5 := principal(t, 1), principal(t, 2), principal(t, 7), principal(t, 5)
	g0 := seal(t, root(t), k1)
	tmpl := Template{TTL: 600, Depth: 0, Images: []addr.Addr{img1}, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6},
		Caveats: Caveats{Models: []string{"qwen-7b"}, Tiers: []string{"S2"}, Hosts: []string{"api.example.com:443"}, Paths: []string{"/data"}, Runs: 1, Rate: &Rate{N: 1, Per: 60}}}
	pol := seal(t, &Policy{Grant: g0.ID, Minter: host.Public(), To: k5.Public(), Template: tmpl, Max: 10, Rate: Rate{N: 60, Per: 60},
		Events: []string{"event:deploy", "every:3600"}, Iat: g0.Grant.Iat, Exp: g0.Grant.Exp}, k2)
	mint := func(edit func(*Grant)) *Token {
		pid := pol.ID
		g := &Grant{Aud: k5.Public(), Parent: &g0.ID, Policy: &pid, Iat: uint64(now.Unix()), Exp: uint64(now.Unix()) + 600, Depth: 0,
			Images: tmpl.Images, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6}, Caveats: tmpl.Caveats}
		if edit != nil {
			edit(g)
		}
		return seal(t, g, host)
	}
	ok := mint(nil)
	if _, err := Verify([][]byte{g0.Bytes, pol.Bytes, ok.Bytes}, roots(t), now); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		chain [][]byte
		code  reject.Code
	}{
		{"no policy before it", [][]byte{g0.Bytes, ok.Bytes}, reject.BrokenChain},
		{"past the ttl", [][]byte{g0.Bytes, pol.Bytes, mint(func(g *Grant) { g.Exp = g.Iat + 601 }).Bytes}, reject.WidenExpiry},
		{"over the template", [][]byte{g0.Bytes, pol.Bytes, mint(func(g *Grant) { g.Ceilings[device.CPU] = 1e6 + 1 }).Bytes}, reject.WidenCeiling},
		{"for someone else", [][]byte{g0.Bytes, pol.Bytes, mint(func(g *Grant) { g.Aud = k2.Public() }).Bytes}, reject.WrongAudience},
		{"signed by the holder, not the minter", [][]byte{g0.Bytes, pol.Bytes, func() []byte {
			pid := pol.ID
			return seal(t, &Grant{Aud: k5.Public(), Parent: &g0.ID, Policy: &pid, Iat: uint64(now.Unix()), Exp: uint64(now.Unix()) + 600,
				Images: tmpl.Images, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1}, Caveats: tmpl.Caveats}, k2).Bytes
		}()}, reject.WrongIssuer},
		{"a policy by someone else", [][]byte{g0.Bytes, seal(t, pol.Policy, k5).Bytes, ok.Bytes}, reject.BrokenChain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.chain, roots(t), now)
			if codeOf(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
}

func TestAmendmentNarrows(t *testing.T) {
	g := root(t)
	a := &Amendment{Exp: g.Exp - 1, Images: g.Images, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1}, Caveats: g.Caveats}
	if err := Narrows(a.Terms(), g.Terms(), "amendment.", true); err != nil {
		t.Fatal(err)
	}
	a.Ceilings[device.CPU] = 100e6 + 1
	if err := Narrows(a.Terms(), g.Terms(), "amendment.", true); codeOf(err) != reject.AmendWidens || !strings.Contains(err.Error(), "ceilings.Cpu") {
		t.Fatalf("got %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	k1 := principal(f, 1)
	g0 := seal(f, root(f), k1)
	f.Add(g0.Bytes)
	f.Add(seal(f, &Revocation{Grant: g0.ID, Iat: 1}, k1).Bytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := Open(b)
		if err != nil {
			var re *reject.Error
			if !errors.As(err, &re) {
				t.Fatalf("not a *reject.Error: %v", err)
			}
			return
		}
		if tok.ID != addr.Of(b) {
			t.Fatal("id is not the address of the bytes")
		}
	})
}

func FuzzVerify(f *testing.F) {
	k1, k2, k3 := principal(f, 1), principal(f, 2), principal(f, 3)
	g0 := seal(f, root(f), k1)
	g1 := seal(f, child(g0, k3.Public(), nil), k2)
	f.Add(EncodeChain([][]byte{g0.Bytes, g1.Bytes}))
	tr := key.NewTrust(k1.Public())
	f.Fuzz(func(t *testing.T, b []byte) {
		els, err := DecodeChain(b)
		if err != nil {
			return
		}
		c, err := Verify(els, tr, now)
		if err == nil && len(c.Grants) == 0 {
			t.Fatal("a verified chain of no grants")
		}
	})
}

// TestHostPatterns: a pattern has one spelling (§3.1), and an address is
// the prefix of its full length when one pattern covers another.
func TestHostPatterns(t *testing.T) {
	for _, s := range []string{
		"api.example.com", "*.example.com:443", "10.0.0.0/8", "10.1.2.3", "10.1.2.3:80",
		"2001:db8::1", "2001:db8::/32", "[2001:db8::1]:443", "[2001:db8::/32]:443", "xn--bcher-kva.example",
	} {
		if _, err := parsePattern(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{
		"API.example.com", "example.com.", "*.", "10.0.0.1/8", "010.0.0.1", "10.0.0.0/08",
		"2001:DB8::1", "2001:db8:0:0::1", "[2001:db8::1]", "[10.0.0.1]:443", "::ffff:10.0.0.1",
		"fe80::1%eth0", "api.example.com:0443", "api.example.com:65536", "bücher.example",
	} {
		if _, err := parsePattern(s); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
	covers := func(p, c string) bool {
		pp, err := parsePattern(p)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := parsePattern(c)
		if err != nil {
			t.Fatal(err)
		}
		return pp.coversPattern(cp)
	}
	for _, tc := range []struct {
		parent, child string
		want          bool
	}{
		{"10.1.2.3", "10.1.2.3/32", true},
		{"10.1.2.3/32", "10.1.2.3", true},
		{"10.0.0.0/8", "10.1.2.3:443", true},
		{"10.0.0.0/8:443", "10.1.2.3", false},
		{"10.0.0.0/16", "10.0.0.0/8", false},
		{"2001:db8::/32", "10.0.0.1", false},
		{"*.example.com", "*.eu.example.com:443", true},
		{"*.example.com", "example.com", false},
		{"api.example.com", "*.api.example.com", false},
	} {
		if got := covers(tc.parent, tc.child); got != tc.want {
			t.Errorf("%s covers %s: %v, want %v", tc.parent, tc.child, got, tc.want)
		}
	}
	if !HostAllowed([]string{"10.0.0.0/8"}, "::ffff:10.1.2.3", 443) {
		t.Error("an IPv4-mapped destination is its IPv4 address")
	}
	for _, p := range []string{"/data/../etc", "/data/", "data/x", "/data/a\x00b"} {
		if PathAllowed([]string{"/data"}, p) {
			t.Errorf("%q: a path that is not absolute and clean is below nothing", p)
		}
	}
}
