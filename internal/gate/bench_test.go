package gate

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// BenchmarkDecideDepth8 is one gate decision for a chain of eight grants:
// the chain verified (eight signatures), the invocation checked, every
// grant's terms admitted, and the budget reserved at all eight in one
// ledger entry, fsynced. The goal: at most 1 ms.
func BenchmarkDecideDepth8(b *testing.B) {
	gt, els, invs, now := depth8(b, b.N)
	a := ask(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := gt.Decide(Presentation{Chain: els, Invocation: invs[i]}, a, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideDepth8Parallel is the same with decisions side by side:
// the ledger writes and syncs the reservations that arrive during one
// sync together (group commit).
func BenchmarkDecideDepth8Parallel(b *testing.B) {
	gt, els, invs, now := depth8(b, b.N)
	a := ask(1)
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			if _, err := gt.Decide(Presentation{Chain: els, Invocation: invs[i]}, a, now.Add(time.Hour)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// depth8 is a gate, a chain of eight grants and n invocations of it.
func depth8(b *testing.B, n int) (*Gate, [][]byte, [][]byte, time.Time) {
	now := time.Unix(1_800_000_000, 0)
	keys := make([]key.Private, 9)
	for i := range keys {
		keys[i] = principal(b, byte(i+1))
	}
	s := uint64(now.Unix())
	var chain []*jcp.Token
	g := &jcp.Grant{Aud: keys[1].Public(), Iat: s, Exp: s + 86400, Depth: 8, Images: []addr.Addr{img},
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1 << 60}, Caveats: jcp.Caveats{Tiers: []string{"S1"}}}
	chain = append(chain, seal(b, g, keys[0]))
	for i := 1; i < 8; i++ {
		p := chain[i-1]
		g := &jcp.Grant{Aud: keys[i+1].Public(), Parent: &p.ID, Iat: s, Exp: s + 86400, Depth: uint64(8 - i), Images: []addr.Addr{img},
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1 << 60}, Caveats: jcp.Caveats{Tiers: []string{"S1"}}}
		chain = append(chain, seal(b, g, keys[i]))
	}
	host := principal(b, 99)
	clock := func() time.Time { return now }
	l, err := budget.Open(filepath.Join(b.TempDir(), "ledger.jsonl"), key.NewTrust(keys[0].Public()), host, clock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	gt := &Gate{Ledger: l, Key: host, Roots: key.NewTrust(keys[0].Public()), Clock: clock}
	els := make([][]byte, len(chain))
	for i, c := range chain {
		els[i] = c.Bytes
	}
	leaf := chain[len(chain)-1]
	invs := make([][]byte, n)
	for i := range invs {
		invs[i] = seal(b, &jcp.Invocation{Grant: leaf.ID, Iat: s}, keys[8]).Bytes
	}
	return gt, els, invs, now
}
