package jcp

import (
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/key"
)

// depth8 is a chain of eight grants, each from its parent's audience;
// salt makes each chain's bytes its own.
func depth8(b *testing.B, keys []key.Private, salt byte) [][]byte {
	s := uint64(now.Unix())
	var els [][]byte
	var parent *Token
	for i := 0; i < 8; i++ {
		g := &Grant{Aud: keys[i+1].Public(), Iat: s, Exp: s + 3600, Depth: uint64(8 - i), Images: []addr.Addr{img1},
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1 << 40}, Nonce: make([]byte, 16), Caveats: Caveats{Tiers: []string{"S1"}}}
		g.Nonce[0] = salt
		if parent != nil {
			g.Parent = &parent.ID
		}
		parent = seal(b, g, keys[i])
		els = append(els, parent.Bytes)
	}
	return els
}

func chainKeys(b *testing.B) []key.Private {
	keys := make([]key.Private, 9)
	for i := range keys {
		keys[i] = principal(b, byte(i+1))
	}
	return keys
}

// BenchmarkVerifyDepth8Cold verifies chains of eight grants never seen
// before: eight envelopes decoded and eight signatures checked.
func BenchmarkVerifyDepth8Cold(b *testing.B) {
	keys := chainKeys(b)
	tr := key.NewTrust(keys[0].Public())
	chains := make([][][]byte, b.N)
	for i := range chains {
		chains[i] = depth8(b, keys, byte(i%251)+1)
		verified = &idSet{max: 1 << 16} // none of them seen
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		verified = &idSet{max: 1 << 16}
		b.StartTimer()
		if _, err := Verify(chains[i], tr, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyDepth8Warm verifies the same chain again: decoded and
// checked, its signatures remembered.
func BenchmarkVerifyDepth8Warm(b *testing.B) {
	keys := chainKeys(b)
	tr := key.NewTrust(keys[0].Public())
	els := depth8(b, keys, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Verify(els, tr, now); err != nil {
			b.Fatal(err)
		}
	}
}
