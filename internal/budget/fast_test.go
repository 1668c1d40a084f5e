package budget

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/jcs"
)

// The hot entries' lines are exactly what the canonical encoder makes of
// their wire forms, and read back to the same entry.
func TestFastLineIsCanonical(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a := func() addr.Addr {
		var x addr.Addr
		for i := range x {
			x[i] = byte(r.Uint32())
		}
		return x
	}
	uj := func() map[device.Class]energy.Microjoules {
		m := map[device.Class]energy.Microjoules{}
		for _, c := range device.Classes {
			if r.IntN(3) == 0 {
				m[c] = energy.Microjoules(r.Uint64N(maxUJ + 1))
			}
		}
		return m
	}
	for i := range 2000 {
		n := r.Uint64N(maxUJ + 1)
		var e *entry
		var w any
		switch i % 3 {
		case 0:
			p := make([]addr.Addr, 1+r.IntN(5))
			for j := range p {
				p[j] = a()
			}
			e = &entry{op: opReserve, n: n, path: p, uj: uj(), inv: a(), at: r.Int64(), until: r.Int64()}
			w = reserveWire{At: nanos(e.at), Inv: e.inv, N: n, Op: e.op, Path: p, UJ: e.uj, Until: nanos(e.until)}
		case 1:
			e = &entry{op: opPost, n: n, uj: uj(), run: a()}
			w = postWire{N: n, Op: e.op, Run: e.run, UJ: e.uj}
		case 2:
			e = &entry{op: opRelease, n: n, why: []string{WhyRefused, WhyFailed, WhyExpired}[r.IntN(3)]}
			w = releaseWire{N: n, Op: e.op, Why: e.why}
		}
		want, err := jcs.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := e.fastLine()
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("fast:\n%s\ncanonical:\n%s", got, want)
		}
		back, ok := fastParse(got)
		if !ok {
			t.Fatalf("fastParse refused its own line %s", got)
		}
		if again, _ := back.fastLine(); !bytes.Equal(again, got) {
			t.Fatalf("read back as another entry: %s", again)
		}
	}
}
