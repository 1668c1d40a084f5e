package gate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

var img = addr.Of([]byte("the program"))

func principal(t testing.TB, n byte) key.Private {
	t.Helper()
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type world struct {
	gate             *Gate
	root, alice, bob key.Private
	g0, g1           *jcp.Token
	now              time.Time
	dir              string
}

// newWorld: root grants alice 100 J of CPU; alice delegates 50 J to bob.
func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{root: principal(t, 1), alice: principal(t, 2), bob: principal(t, 3), now: time.Unix(1_800_000_000, 0), dir: t.TempDir()}
	host := principal(t, 9)
	clock := func() time.Time { return w.now }
	l, err := budget.Open(filepath.Join(w.dir, "ledger.jsonl"), key.NewTrust(w.root.Public()), host, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	w.gate = &Gate{Ledger: l, Key: host, Roots: key.NewTrust(w.root.Public()), Denied: filepath.Join(w.dir, "denied"), Clock: clock}
	s := uint64(w.now.Unix())
	w.g0 = seal(t, &jcp.Grant{Aud: w.alice.Public(), Iat: s, Exp: s + 3600, Depth: 2, Images: []addr.Addr{img},
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 100e6}, Caveats: jcp.Caveats{Tiers: []string{"S1", "S2"}}}, w.root)
	w.g1 = seal(t, &jcp.Grant{Aud: w.bob.Public(), Parent: &w.g0.ID, Iat: s, Exp: s + 1800, Depth: 0, Images: []addr.Addr{img},
		Ceilings: map[device.Class]energy.Microjoules{device.CPU: 50e6}, Caveats: jcp.Caveats{Tiers: []string{"S1"}}}, w.alice)
	return w
}

func seal(t testing.TB, v any, k key.Private) *jcp.Token {
	t.Helper()
	tok, err := jcp.Seal(v, k)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (w *world) present(t testing.TB, by key.Private, leaf *jcp.Token, chain ...*jcp.Token) Presentation {
	inv := seal(t, &jcp.Invocation{Grant: leaf.ID, Iat: uint64(w.now.Unix())}, by)
	var els [][]byte
	for _, c := range chain {
		els = append(els, c.Bytes)
	}
	return Presentation{Chain: els, Invocation: inv.Bytes}
}

func ask(uj energy.Microjoules) jcp.Ask {
	return jcp.Ask{Image: img, Tier: tier.S1, Classes: []device.Class{device.CPU}, Budgets: map[device.Class]energy.Microjoules{device.CPU: uj}}
}

func codeOf(err error) reject.Code {
	var re *reject.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

func TestAllowReservesAtEveryGrantThenPosts(t *testing.T) {
	w := newWorld(t)
	d, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(20e6), w.now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !d.Decision.Decision.Allow || d.Decision.Decision.Reservation != d.Reservation {
		t.Fatalf("decision %+v", d.Decision.Decision)
	}
	for _, id := range []addr.Addr{w.g0.ID, w.g1.ID} {
		b, _ := w.gate.Ledger.Budget(id)
		if b.Classes[0].Reserved != 20e6 {
			t.Fatalf("%s: reserved %s", id, b.Classes[0].Reserved)
		}
	}
	r := &receipt.Receipt{Devices: []receipt.Device{{Class: device.CPU, Measured: 0, Estimated: 7e6}}}
	if err := w.gate.Settle(d.Reservation, r, addr.Of([]byte("run"))); err != nil {
		t.Fatal(err)
	}
	b, _ := w.gate.Ledger.Budget(w.g0.ID)
	if c := b.Classes[0]; c.Reserved != 0 || c.Spent != 7e6 || c.Remaining != 93e6 {
		t.Fatalf("after the post: %+v", c)
	}
	if err := w.gate.Settle(d.Reservation, r, addr.Of([]byte("run"))); codeOf(err) != reject.DoubleSpend {
		t.Fatalf("a second post: %v", err)
	}
}

func TestDenialsAreSealedAndKept(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		name string
		p    Presentation
		a    jcp.Ask
		code reject.Code
	}{
		{"presented by someone else", w.present(t, w.alice, w.g1, w.g0, w.g1), ask(1e6), reject.WrongAudience},
		{"over the ceiling", w.present(t, w.bob, w.g1, w.g0, w.g1), ask(50e6 + 1), reject.OverCeiling},
		{"a tier the grant does not give", w.present(t, w.bob, w.g1, w.g0, w.g1), func() jcp.Ask { a := ask(1); a.Tier = tier.S2; return a }(), reject.TierNotGranted},
		{"another image", w.present(t, w.bob, w.g1, w.g0, w.g1), func() jcp.Ask { a := ask(1); a.Image = addr.Of([]byte("x")); return a }(), reject.ImageNotGranted},
		{"no chain", Presentation{Invocation: []byte("x")}, ask(1), reject.ChainDepth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.gate.Decide(tc.p, tc.a, w.now.Add(time.Hour))
			var de *DeniedError
			if !errors.As(err, &de) || codeOf(err) != tc.code {
				t.Fatalf("got %v, want a denial %s", err, tc.code)
			}
			b, err := os.ReadFile(filepath.Join(w.dir, "denied", de.Decision.Hex()+".cose"))
			if err != nil {
				t.Fatal(err)
			}
			d, err := jcp.Open(b)
			if err != nil || d.Decision == nil || d.Decision.Allow || d.Decision.Code != string(tc.code) || d.ID != de.Decision {
				t.Fatalf("kept decision %v %+v", err, d)
			}
		})
	}
	// Nothing was reserved by any of them.
	for _, b := range w.gate.Ledger.Tree() {
		if b.Classes[0].Reserved != 0 {
			t.Fatalf("%s reserved %s after denials", b.Grant, b.Classes[0].Reserved)
		}
	}
}

func TestReplayedInvocationIsRefused(t *testing.T) {
	w := newWorld(t)
	p := w.present(t, w.bob, w.g1, w.g0, w.g1)
	if _, err := w.gate.Decide(p, ask(1e6), w.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.gate.Decide(p, ask(1e6), w.now.Add(time.Hour)); codeOf(err) != reject.Replay {
		t.Fatalf("the same invocation again: %v", err)
	}
}

func TestRevokedParentRefusesTheChild(t *testing.T) {
	w := newWorld(t)
	if _, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(1e6), w.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rev := seal(t, &jcp.Revocation{Grant: w.g0.ID, Iat: uint64(w.now.Unix())}, w.root)
	if err := w.gate.Ledger.Revoke(rev); err != nil {
		t.Fatal(err)
	}
	if _, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(1e6), w.now.Add(time.Hour)); codeOf(err) != reject.Revoked {
		t.Fatalf("after revoking the root: %v", err)
	}
}

func TestAmendmentTightensTheRunningAllowance(t *testing.T) {
	w := newWorld(t)
	d, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(40e6), w.now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if a := w.gate.Allowance(d, device.CPU); a != 40e6 {
		t.Fatalf("allowance %s", a)
	}
	g := w.g1.Grant
	by := func(k key.Private, uj energy.Microjoules, seq uint64) error {
		return w.gate.Ledger.Amend(seal(t, &jcp.Amendment{Grant: w.g1.ID, Seq: seq, Iat: uint64(w.now.Unix()), Exp: g.Exp, Images: g.Images,
			Ceilings: map[device.Class]energy.Microjoules{device.CPU: uj}, Caveats: g.Caveats}, k))
	}
	if err := by(w.bob, 10e6, 1); codeOf(err) != reject.AmendNotIssuer {
		t.Fatalf("the audience amending its own grant: %v", err)
	}
	if err := by(w.alice, 60e6, 1); codeOf(err) != reject.AmendWidens {
		t.Fatalf("a widening amendment: %v", err)
	}
	if err := by(w.alice, 10e6, 1); err != nil {
		t.Fatal(err)
	}
	if a := w.gate.Allowance(d, device.CPU); a != 10e6 {
		t.Fatalf("allowance after the amendment %s, want 10 J", a)
	}
	if _, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(1e6), w.now.Add(time.Hour)); codeOf(err) != reject.OverCeiling {
		t.Fatalf("a new run after the amendment: %v", err)
	}
}

// 200 runs at once against a chain whose ceiling allows 50: exactly 50
// are allowed, whatever the order the races fall in.
func TestConcurrentRunsNeverExceedTheCeiling(t *testing.T) {
	w := newWorld(t)
	ps := make([]Presentation, 200)
	for i := range ps {
		ps[i] = w.present(t, w.bob, w.g1, w.g0, w.g1)
	}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := w.gate.Decide(ps[i], ask(1e6), w.now.Add(time.Hour))
			switch {
			case err == nil:
				allowed.Add(1)
			case codeOf(err) == reject.OverCeiling:
				denied.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 50 || denied.Load() != 150 {
		t.Fatalf("allowed %d, denied %d; want 50 and 150", allowed.Load(), denied.Load())
	}
	b, _ := w.gate.Ledger.Budget(w.g1.ID)
	if b.Classes[0].Reserved != 50e6 {
		t.Fatalf("reserved %s", b.Classes[0].Reserved)
	}
}

func TestStandingGrantMintsOnItsEvent(t *testing.T) {
	w := newWorld(t)
	carol := principal(t, 4)
	s := uint64(w.now.Unix())
	pol := seal(t, &jcp.Policy{Grant: w.g0.ID, Minter: w.gate.Key.Public(), To: carol.Public(), Max: 3, Rate: jcp.Rate{N: 2, Per: 60},
		Events: []string{"event:deploy"}, Iat: s, Exp: s + 600,
		Template: jcp.Template{TTL: 60, Images: []addr.Addr{img}, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6}, Caveats: jcp.Caveats{Tiers: []string{"S1"}}}}, w.alice)
	if err := w.gate.Ledger.Admit(w.g0, pol); err != nil {
		t.Fatal(err)
	}
	minted, refused := w.gate.Event("event:deploy", w.now)
	if len(minted) != 1 || len(refused) != 0 {
		t.Fatalf("minted %d, refused %v", len(minted), refused)
	}
	m := minted[0]
	c, err := jcp.Verify(m.Elements, w.gate.Roots, w.now)
	if err != nil || c.Leaf().Grant.Aud != carol.Public() {
		t.Fatalf("the minted chain: %v", err)
	}
	// carol runs with it
	inv := seal(t, &jcp.Invocation{Grant: m.Child.ID, Iat: s}, carol)
	if _, err := w.gate.Decide(Presentation{Chain: m.Elements, Invocation: inv.Bytes}, ask(1e6), w.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if m2, _ := w.gate.Event("event:deploy", w.now); len(m2) != 1 {
		t.Fatal("the second mint in the minute was refused")
	}
	if _, r3 := w.gate.Event("event:deploy", w.now); len(r3) != 1 || codeOf(r3[0].Err) != reject.RateExceeded {
		t.Fatalf("a third mint in the minute: %v", r3)
	}
	if m0, r0 := w.gate.Event("event:other", w.now); len(m0)+len(r0) != 0 {
		t.Fatal("an event the policy does not name minted")
	}
}

// A host killed between the reservation and the post: on the next
// opening, a run that was sealed is posted from its receipt, one that
// was not stays reserved until its until, then is released as expired;
// nothing is posted twice.
func TestRecoverSettlesWhatAKilledHostLeftOpen(t *testing.T) {
	w := newWorld(t)
	sealedRun, lost := addr.Of([]byte("sealed run")), addr.Addr{}
	d1, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(10e6), w.now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := w.gate.Decide(w.present(t, w.bob, w.g1, w.g0, w.g1), ask(5e6), w.now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	rc := &receipt.Receipt{Devices: []receipt.Device{{Class: device.CPU, Estimated: 3e6}}}
	find := func(n uint64, since time.Time) (*receipt.Receipt, addr.Addr, bool, error) {
		if n == d1.Reservation {
			return rc, sealedRun, true, nil
		}
		return nil, lost, false, nil
	}
	posted, expired, err := w.gate.Recover(find)
	if err != nil || posted != 1 || expired != 0 {
		t.Fatalf("recover: posted %d expired %d %v", posted, expired, err)
	}
	b, _ := w.gate.Ledger.Budget(w.g1.ID)
	if c := b.Classes[0]; c.Spent != 3e6 || c.Reserved != 5e6 {
		t.Fatalf("after recovery: %+v", c)
	}
	w.now = w.now.Add(2 * time.Hour) // past d2's until
	posted, expired, err = w.gate.Recover(find)
	if err != nil || posted != 0 || expired != 1 {
		t.Fatalf("second recover: posted %d expired %d %v", posted, expired, err)
	}
	b, _ = w.gate.Ledger.Budget(w.g1.ID)
	if c := b.Classes[0]; c.Spent != 3e6 || c.Reserved != 0 || len(w.gate.Ledger.Outstanding()) != 0 {
		t.Fatalf("after expiry: %+v", c)
	}
	if err := w.gate.Settle(d2.Reservation, rc, lost); codeOf(err) != reject.DoubleSpend {
		t.Fatalf("a post after the expiry: %v", err)
	}
}

// A scheduled standing grant mints once per period boundary crossed.
func TestScheduledStandingGrant(t *testing.T) {
	w := newWorld(t)
	s := uint64(w.now.Unix())
	pol := seal(t, &jcp.Policy{Grant: w.g0.ID, Minter: w.gate.Key.Public(), To: w.bob.Public(), Max: 10, Rate: jcp.Rate{N: 10, Per: 60},
		Events: []string{"every:60"}, Iat: s, Exp: s + 3600,
		Template: jcp.Template{TTL: 60, Images: []addr.Addr{img}, Ceilings: map[device.Class]energy.Microjoules{device.CPU: 1e6}, Caveats: jcp.Caveats{Tiers: []string{"S1"}}}}, w.alice)
	if err := w.gate.Ledger.Admit(w.g0, pol); err != nil {
		t.Fatal(err)
	}
	start := time.Unix(int64(s/60*60), 0) // a period boundary
	total := 0
	for sec := 1; sec <= 180; sec++ { // three minutes, a tick a second
		m, r := w.gate.Tick(start.Add(time.Duration(sec-1)*time.Second), start.Add(time.Duration(sec)*time.Second))
		if len(r) > 0 {
			t.Fatal(r[0].Err)
		}
		total += len(m)
	}
	if total != 3 {
		t.Fatalf("%d mints in three minutes of an every:60 policy", total)
	}
}
