package budget

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
)

func TestGenesisAndLines(t *testing.T) {
	l, file := open(t, newClock().now)
	if _, h := l.Head(); h != addr.Addr(blake3.Sum256([]byte("sandbox.jcp-ledger/1"))) {
		t.Fatal("head₀ is not BLAKE3 of the domain tag")
	}
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	inv := addr.Of([]byte("invocation"))
	n, err := l.Reserve(Reservation{Path: path(tr.g, tr.c, tr.r), UJ: cpu(2 * J), Invocation: inv, Until: now.Add(time.Minute)})
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if err := l.Post(1, map[device.Class]energy.Microjoules{device.CPU: 3 * J, device.GPU: 1}, addr.Of([]byte("run"))); err != nil {
		t.Fatal(err)
	}
	l.Close()
	entries, _, _ := readLines(t, file)
	want := []string{
		`{"at":"1800000000000000000","inv":"` + inv.String() + `","n":1,"op":"reserve","path":["` + tr.g.ID.String() + `","` + tr.c.ID.String() + `","` + tr.r.ID.String() + `"],"uj":{"Cpu":2000000},"until":"1800000060000000000"}`,
		`{"n":1,"op":"post","run":"` + addr.Of([]byte("run")).String() + `","uj":{"Cpu":3000000,"Gpu":1}}`,
	}
	if len(entries) != 5 || entries[3] != want[0] || entries[4] != want[1] {
		t.Fatalf("the lines are not §7's:\n%s\nwant\n%s", strings.Join(entries, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(entries[0], `{"op":"admit","token":"`) || strings.ContainsAny(entries[0], "+/=") {
		t.Fatalf("an admit is not its token in base64url without padding: %s", entries[0])
	}
}

// 200 callers at once against a parent whose ceiling holds 50 of them:
// exactly 50 reserve, the rest are refused at the parent, and nothing
// ever shows more reserved than the ceiling.
func TestConcurrentReservesStopAtTheCeiling(t *testing.T) {
	l, file := open(t, newClock().now)
	k1, k2 := principal(t, 1), principal(t, 2)
	root := grantOf(t, k1, k2.Public(), nil, 2, cpu(50*J), jcp.Caveats{})
	kids := make([]*jcp.Token, 4)
	for i := range kids {
		kids[i] = grantOf(t, k2, principal(t, byte(10+i)).Public(), root, 1, cpu(50*J), jcp.Caveats{})
	}
	if err := l.Admit(append([]*jcp.Token{root}, kids...)...); err != nil {
		t.Fatal(err)
	}
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	watched := make(chan energy.Microjoules)
	go func() {
		var most energy.Microjoules
		for {
			select {
			case <-stop:
				watched <- most
				return
			default:
			}
			b := budgetOf(t, l, root)
			most = max(most, cpuOf(b).Reserved)
		}
	}()
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.Reserve(res(J, kids[i%4], root))
			switch {
			case err == nil:
				ok.Add(1)
			case reject.CodeOf(err) == reject.OverCeiling && strings.Contains(err.Error(), root.ID.String()+".ceilings.Cpu"):
				over.Add(1)
			default:
				t.Errorf("reserve %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if most := <-watched; most > 50*J {
		t.Fatalf("%s reserved at once under a ceiling of 50 J", most)
	}
	if ok.Load() != 50 || over.Load() != 150 {
		t.Fatalf("%d reserved and %d refused; want 50 and 150", ok.Load(), over.Load())
	}
	b := budgetOf(t, l, root)
	if c := cpuOf(b); c.Reserved != 50*J || c.Remaining != 0 || b.Runs != 50 || len(l.Outstanding()) != 50 {
		t.Fatalf("the root after: %+v", b)
	}
	l.Close()
	if c := cpuOf(mustBudget(t, verifyFile(t, file), root)); c.Reserved != 50*J {
		t.Fatalf("the verifier sees %+v", c)
	}
}

func mustBudget(t testing.TB, s *State, g *jcp.Token) Budget {
	t.Helper()
	b, ok := s.Budget(g.ID)
	if !ok {
		t.Fatal("no budget")
	}
	return b
}

// step is one change to a ledger, and the refusal it meets ("" none).
type step struct {
	name  string
	do    func(*Ledger) error
	code  reject.Code
	where string
}

func run(t *testing.T, l *Ledger, steps []step) {
	t.Helper()
	for _, s := range steps {
		refused(t, s.name, s.do(l), s.code, s.where)
	}
}

func reserve(r Reservation) func(*Ledger) error {
	return func(l *Ledger) error { _, err := l.Reserve(r); return err }
}

func post(n uint64, uj energy.Microjoules) func(*Ledger) error {
	return func(l *Ledger) error { return l.Post(n, cpu(uj), addr.Of([]byte(fmt.Sprint("run ", n)))) }
}

func release(n uint64, why string) func(*Ledger) error {
	return func(l *Ledger) error { return l.Release(n, why) }
}

// Spending at a grandchild counts at its parent and the root; a post
// over its reservation is spent all the same; remaining floors at 0.
func TestSpendingCountsUpTheTree(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	gcr := func(uj energy.Microjoules) Reservation { return res(uj, tr.g, tr.c, tr.r) }
	run(t, l, []step{
		{"10 J at the grandchild", reserve(gcr(10 * J)), "", ""},
		{"a post over the reservation", post(1, 15*J), "", ""},
		{"6 J more than the grandchild has", reserve(gcr(6 * J)), reject.OverCeiling, tr.g.ID.String() + ".ceilings.Cpu"},
		{"5 J, exactly what is left", reserve(gcr(5 * J)), "", ""},
		{"a post past the ceiling", post(2, 8*J), "", ""},
		{"the child alone", reserve(res(J, tr.c, tr.r)), "", ""},
		{"a path that skips the child", reserve(res(J, tr.g, tr.r)), reject.BrokenChain, "path[1]"},
		{"a path short of the root", reserve(res(J, tr.g, tr.c)), reject.BrokenChain, "path[1]"},
		{"a class not granted", reserve(Reservation{Path: path(tr.g, tr.c, tr.r), UJ: map[device.Class]energy.Microjoules{device.GPU: 1}, Invocation: inv()}), reject.ClassNotGranted, tr.g.ID.String() + ".ceilings.Gpu"},
		{"no class", reserve(Reservation{Path: path(tr.r), UJ: nil, Invocation: inv()}), reject.Invalid, "uj"},
		{"no path", reserve(Reservation{UJ: cpu(1), Invocation: inv()}), reject.BrokenChain, "path"},
	})
	for _, tc := range []struct {
		g                          *jcp.Token
		reserved, spent, remaining energy.Microjoules
		runs                       uint64
	}{
		{tr.g, 0, 23 * J, 0, 2},
		{tr.c, J, 23 * J, 26 * J, 3},
		{tr.r, J, 23 * J, 76 * J, 3},
	} {
		b := budgetOf(t, l, tc.g)
		c := cpuOf(b)
		if c.Reserved != tc.reserved || c.Spent != tc.spent || c.Remaining != tc.remaining || b.Runs != tc.runs || c.Ceiling == 0 {
			t.Errorf("%s: %+v runs %d; want reserved %s spent %s remaining %s runs %d", tc.g.ID.Short(), c, b.Runs, tc.reserved, tc.spent, tc.remaining, tc.runs)
		}
	}
	if got := l.Tree(); len(got) != 3 || got[0].Grant != tr.r.ID || got[1].Grant != tr.c.ID || got[2].Grant != tr.g.ID || *got[2].Parent != tr.c.ID {
		t.Fatalf("the tree is not root, child, grandchild: %+v", got)
	}
	if out := l.Outstanding(); len(out) != 1 || out[0].N != 3 || out[0].Path[0] != tr.c.ID {
		t.Fatalf("outstanding: %+v", out)
	}
}

// runs and rate are counted over a grant's subtree by the clock, and a
// reservation released as refused does not count.
func TestRunsAndRate(t *testing.T) {
	c := newClock()
	l, _ := open(t, c.now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{Runs: 3, Rate: &jcp.Rate{N: 2, Per: 60}})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	tick := func(d time.Duration) func(*Ledger) error {
		return func(*Ledger) error { c.advance(d); return nil }
	}
	run(t, l, []step{
		{"a first run", reserve(res(J, tr.g, tr.c, tr.r)), "", ""},
		{"a second, at the child", reserve(res(J, tr.c, tr.r)), "", ""},
		{"a third within the minute", reserve(res(J, tr.r)), reject.RateExceeded, tr.r.ID.String() + ".caveats.rate"},
		{"the second refused", release(2, WhyRefused), "", ""},
		{"a third: the refused one does not count", reserve(res(J, tr.r)), "", ""},
		{"a minute on", tick(time.Minute), "", ""},
		{"a fourth, at the root", reserve(res(J, tr.r)), "", ""},
		{"a failed one still counts", release(4, WhyFailed), "", ""},
		{"a fifth, at the grandchild: the root's subtree is spent", reserve(res(J, tr.g, tr.c, tr.r)), reject.RunsExhausted, tr.r.ID.String() + ".caveats.runs"},
		{"a fifth, at the root", reserve(res(J, tr.r)), reject.RunsExhausted, tr.r.ID.String() + ".caveats.runs"},
	})
	if b := budgetOf(t, l, tr.r); b.Runs != 3 {
		t.Fatalf("runs at the root: %d", b.Runs)
	}
}

// A revocation refuses the grant and its descendants from the next
// reservation; only an issuer of it or of an ancestor revokes.
func TestRevoke(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	revoke := func(g *jcp.Token, by byte) func(*Ledger) error {
		return func(l *Ledger) error {
			return l.Revoke(seal(t, &jcp.Revocation{Grant: g.ID, Iat: uint64(now.Unix())}, principal(t, by)))
		}
	}
	run(t, l, []step{
		{"a run before", reserve(res(J, tr.g, tr.c, tr.r)), "", ""},
		{"the child by its audience", revoke(tr.c, 3), reject.WrongIssuer, "token.iss"},
		{"the child by the grandchild's audience", revoke(tr.c, 4), reject.WrongIssuer, "token.iss"},
		{"a grant never admitted", revoke(grantOf(t, principal(t, 1), principal(t, 2).Public(), nil, 1, cpu(J), jcp.Caveats{}), 1), reject.BrokenChain, "token.grant"},
		{"the grandchild by the child's issuer", revoke(tr.g, 2), "", ""},
		{"at the grandchild", reserve(res(J, tr.g, tr.c, tr.r)), reject.Revoked, "path[0]"},
		{"at the child", reserve(res(J, tr.c, tr.r)), "", ""},
		{"the root by its issuer", revoke(tr.r, 1), "", ""},
		{"at the child, under a revoked root", reserve(res(J, tr.c, tr.r)), reject.Revoked, "path[0]"},
		{"a run reserved before settles", post(1, J), "", ""},
	})
	if !l.Revoked(tr.c.ID) || !budgetOf(t, l, tr.g).Revoked {
		t.Fatal("a descendant of a revoked grant is not revoked")
	}
}

// An amendment is the issuer's, never the audience's; it only narrows,
// in order, and takes effect at the next reservation.
func TestAmend(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	k1 := principal(t, 1)
	self := grantOf(t, k1, k1.Public(), nil, 1, cpu(10*J), jcp.Caveats{})
	if err := l.Admit(append(tr.tokens(), self)...); err != nil {
		t.Fatal(err)
	}
	amend := func(g *jcp.Token, by byte, seq uint64, ceil energy.Microjoules) func(*Ledger) error {
		return func(l *Ledger) error {
			gg := g.Grant
			return l.Amend(seal(t, &jcp.Amendment{Grant: g.ID, Seq: seq, Iat: uint64(now.Unix()), Exp: gg.Exp, Images: gg.Images, Ceilings: cpu(ceil), Caveats: gg.Caveats}, principal(t, by)))
		}
	}
	run(t, l, []step{
		{"20 J at the child", reserve(res(20*J, tr.c, tr.r)), "", ""},
		{"by the child's audience", amend(tr.c, 3, 1, 10*J), reject.AmendNotIssuer, "token.iss"},
		{"by a self-issued grant's issuer, its audience", amend(self, 1, 1, 5*J), reject.AmendNotIssuer, "token.iss"},
		{"widening the child", amend(tr.c, 2, 1, 60*J), reject.AmendWidens, "token.ceilings.Cpu"},
		{"tightening the child to 25 J", amend(tr.c, 2, 1, 25*J), "", ""},
		{"the same seq again", amend(tr.c, 2, 1, 24*J), reject.AmendStale, "token.seq"},
		{"widening back past the amendment", amend(tr.c, 2, 2, 30*J), reject.AmendWidens, "token.ceilings.Cpu"},
		{"10 J the tighter ceiling has no room for", reserve(res(10*J, tr.c, tr.r)), reject.OverCeiling, tr.c.ID.String() + ".ceilings.Cpu"},
		{"5 J it has", reserve(res(5*J, tr.c, tr.r)), "", ""},
		{"tightening below what is reserved", amend(tr.c, 2, 2, 10*J), "", ""},
		{"anything more", reserve(res(1, tr.c, tr.r)), reject.OverCeiling, tr.c.ID.String() + ".ceilings.Cpu"},
	})
	if e, _ := l.Effective(tr.c.ID); e.Ceilings[device.CPU] != 10*J {
		t.Fatalf("effective %+v", e)
	}
	if b := budgetOf(t, l, tr.c); b.Amended != 2 || cpuOf(b).Remaining != 0 || cpuOf(b).Reserved != 25*J {
		t.Fatalf("the amended child: %+v", b)
	}
}

func TestDoubleSpendAndReplay(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	r := res(J, tr.g, tr.c, tr.r)
	run(t, l, []step{
		{"one", reserve(r), "", ""},
		{"two", reserve(res(J, tr.g, tr.c, tr.r)), "", ""},
		{"the same invocation again", reserve(Reservation{Path: r.Path, UJ: r.UJ, Invocation: r.Invocation}), reject.Replay, "inv"},
		{"post one", post(1, J), "", ""},
		{"post one again", post(1, J), reject.DoubleSpend, "n"},
		{"release one after its post", release(1, WhyFailed), reject.DoubleSpend, "n"},
		{"release two, why unknown", release(2, "bored"), reject.Invalid, "why"},
		{"release two", release(2, WhyExpired), "", ""},
		{"release two again", release(2, WhyExpired), reject.DoubleSpend, "n"},
		{"post a reservation never made", post(99, J), reject.DoubleSpend, "n"},
		{"three", reserve(res(J, tr.g, tr.c, tr.r)), "", ""},
		{"post three, a class unknown", func(l *Ledger) error {
			return l.Post(3, map[device.Class]energy.Microjoules{"cpu": 1}, addr.Of([]byte("run")))
		}, reject.Invalid, "uj.cpu"},
	})
	if b := budgetOf(t, l, tr.g); cpuOf(b).Spent != J || cpuOf(b).Reserved != J {
		t.Fatalf("%+v", b)
	}
}

func TestAdmit(t *testing.T) {
	l, _ := open(t, newClock().now)
	k1, k2, k3, k7 := principal(t, 1), principal(t, 2), principal(t, 3), principal(t, 7)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	stranger := grantOf(t, k7, k2.Public(), nil, 1, cpu(J), jcp.Caveats{})
	wide := grantOf(t, k2, k3.Public(), tr.r, 1, cpu(200*J), jcp.Caveats{})
	byOther := grantOf(t, k3, k3.Public(), tr.r, 1, cpu(J), jcp.Caveats{})
	rev := seal(t, &jcp.Revocation{Grant: tr.r.ID, Iat: 1}, k1)
	admit := func(ts ...*jcp.Token) func(*Ledger) error { return func(l *Ledger) error { return l.Admit(ts...) } }
	run(t, l, []step{
		{"a child before its parent", admit(tr.c), reject.BrokenChain, "token.parent"},
		{"an untrusted root", admit(stranger), reject.UntrustedRoot, "token.iss"},
		{"a tree", admit(tr.tokens()...), "", ""},
		{"a tree again", admit(tr.tokens()...), "", ""},
		{"a child that widens", admit(wide), reject.WidenCeiling, "token.ceilings.Cpu"},
		{"a child not by the parent's audience", admit(byOther), reject.WrongIssuer, "token.iss"},
		{"a revocation", admit(rev), reject.Invalid, "token"},
	})
	if size, _ := l.Head(); size != 3 {
		t.Fatalf("%d entries; the tree's three admits, once", size)
	}
	if tok, ok := l.Token(tr.c.ID); !ok || tok.ID != tr.c.ID {
		t.Fatal("an admitted grant is not found")
	}
}

func TestCheckpoint(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	cp := func(by byte, seq uint64) func(*Ledger) error {
		return func(l *Ledger) error {
			return l.Checkpoint(seal(t, &jcp.Checkpoint{Grant: tr.c.ID, Run: addr.Of([]byte("run")), Seq: seq, Iat: 1}, principal(t, by)))
		}
	}
	run(t, l, []step{
		{"by the issuer", cp(2, 1), reject.WrongAudience, "token.iss"},
		{"by the audience", cp(3, 1), "", ""},
		{"the same seq", cp(3, 1), reject.Invalid, "token.seq"},
		{"the next", cp(3, 2), "", ""},
	})
	if n := l.Checkpoints(tr.c.ID); n != 2 {
		t.Fatalf("the last checkpoint is %d", n)
	}
}

// mintSetup is a root (k1 → k2) held by a policy of k2's that lets the
// host mint children for k6 on "event:push".
func mintSetup(t testing.TB, l *Ledger, max uint64, rate jcp.Rate) (root, pol *jcp.Token) {
	t.Helper()
	k1, k2 := principal(t, 1), principal(t, 2)
	root = grantOf(t, k1, k2.Public(), nil, 2, cpu(100*J), jcp.Caveats{})
	pol = seal(t, &jcp.Policy{Grant: root.ID, Minter: host(t).Public(), To: principal(t, 6).Public(),
		Template: jcp.Template{TTL: 600, Depth: 0, Images: []addr.Addr{img}, Ceilings: cpu(J)},
		Max:      max, Rate: rate, Events: []string{"event:push"}, Iat: root.Grant.Iat, Exp: root.Grant.Exp}, k2)
	if err := l.Admit(root, pol); err != nil {
		t.Fatal(err)
	}
	return root, pol
}

// minted is n children of root under pol, signed by the host. They are
// not opened here: Mint opens what it is given.
func minted(t testing.TB, root, pol *jcp.Token, n int) []*jcp.Token {
	out := make([]*jcp.Token, n)
	to, minter := principal(t, 6).Public(), host(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				g := &jcp.Grant{V: jcp.Version, Iss: minter.Public(), Aud: to, Parent: &root.ID, Policy: &pol.ID, Nonce: nonce(i),
					Iat: uint64(now.Unix()), Exp: uint64(now.Unix()) + 600, Images: []addr.Addr{img}, Ceilings: cpu(J)}
				p, err := detcbor.Marshal(g)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := receipt.SealAs(p, minter, jcp.TypeGrant)
				if err != nil {
					t.Error(err)
					return
				}
				out[i] = &jcp.Token{ID: addr.Of(b), Bytes: b, Type: jcp.TypeGrant, Grant: g}
			}
		}()
	}
	wg.Wait()
	return out
}

func nonce(i int) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(i))
	return b
}

// mintAll mints every child at once, from 64 callers, and counts the
// refusals by code.
func mintAll(t *testing.T, l *Ledger, kids []*jcp.Token) map[reject.Code]int {
	var mu sync.Mutex
	got := map[reject.Code]int{}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(kids)); i = next.Add(1) - 1 {
				err := l.Mint(kids[i], "event:push")
				mu.Lock()
				got[reject.CodeOf(err)]++
				mu.Unlock()
				if err != nil && reject.CodeOf(err) == "" {
					t.Errorf("mint %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	return got
}

// 10,000 mints within one minute of the clock against 60 a minute:
// exactly 60, under concurrency.
func TestMintRate(t *testing.T) {
	var calls atomic.Int64
	l, _ := open(t, func() time.Time { return now.Add(time.Duration(calls.Add(1)-1) * 6 * time.Millisecond) })
	root, pol := mintSetup(t, l, 1_000_000, jcp.Rate{N: 60, Per: 60})
	kids := minted(t, root, pol, 10_000)
	got := mintAll(t, l, kids)
	if got[""] != 60 || got[reject.RateExceeded] != 10_000-60 {
		t.Fatalf("%v; want 60 minted and the rest rate-exceeded", got)
	}
	if calls.Load() > 10_000 {
		t.Fatalf("the clock was read %d times for 10,000 mints", calls.Load())
	}
	minted := 0
	for _, b := range l.Tree() {
		if b.Parent != nil {
			minted++
		}
	}
	if minted != 60 {
		t.Fatalf("%d children in the tree", minted)
	}
}

func TestMintMax(t *testing.T) {
	l, _ := open(t, newClock().now)
	root, pol := mintSetup(t, l, 5, jcp.Rate{N: 1000, Per: 1})
	kids := minted(t, root, pol, 50)
	if err := l.Mint(kids[0], "event:pull"); reject.CodeOf(err) != reject.Invalid {
		t.Fatalf("an event not the policy's: %v", err)
	}
	got := mintAll(t, l, kids[:40])
	if got[""] != 5 || got[reject.RunsExhausted] != 35 {
		t.Fatalf("%v; want 5 minted and 35 runs-exhausted", got)
	}
	// A child minted elsewhere and admitted counts against max too.
	if err := l.Admit(kids[45]); reject.CodeOf(err) != reject.RunsExhausted {
		t.Fatalf("admitting a sixth child: %v", err)
	}
	// A minted child reserves like any grant.
	var kid *jcp.Token
	for _, k := range kids[:40] {
		if _, ok := l.Token(k.ID); ok {
			kid = k
		}
	}
	if _, err := l.Reserve(res(J, kid, root)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(res(1, kid, root)); reject.CodeOf(err) != reject.OverCeiling {
		t.Fatalf("past the template's ceiling: %v", err)
	}
	if err := l.Mint(kid, "event:push"); reject.CodeOf(err) != reject.Invalid {
		t.Fatalf("a child minted twice: %v", err)
	}
}

func TestMintUnderARevokedGrant(t *testing.T) {
	l, _ := open(t, newClock().now)
	root, pol := mintSetup(t, l, 5, jcp.Rate{N: 10, Per: 1})
	kids := minted(t, root, pol, 1)
	if err := l.Revoke(seal(t, &jcp.Revocation{Grant: root.ID, Iat: 1}, principal(t, 1))); err != nil {
		t.Fatal(err)
	}
	if err := l.Mint(kids[0], "event:push"); reject.CodeOf(err) != reject.Revoked {
		t.Fatalf("%v", err)
	}
}

// A mint policy may be revoked by its holder (or an issuer above it): it
// mints no more, and what it minted is refused.
func TestRevokePolicy(t *testing.T) {
	l, _ := open(t, newClock().now)
	root, pol := mintSetup(t, l, 5, jcp.Rate{N: 10, Per: 1})
	kids := minted(t, root, pol, 2)
	revoke := func(by byte) func(*Ledger) error {
		return func(l *Ledger) error {
			return l.Revoke(seal(t, &jcp.Revocation{Grant: pol.ID, Iat: 1}, principal(t, by)))
		}
	}
	run(t, l, []step{
		{"mint one", func(l *Ledger) error { return l.Mint(kids[0], "event:push") }, "", ""},
		{"reserve at it", reserve(res(J, kids[0], root)), "", ""},
		{"revoke the policy, by its audience", revoke(6), reject.WrongIssuer, "token.iss"},
		{"revoke the policy, by its holder", revoke(2), "", ""},
		{"mint another", func(l *Ledger) error { return l.Mint(kids[1], "event:push") }, reject.Revoked, "token.policy"},
		{"reserve at the one minted", reserve(res(J, kids[0], root)), reject.Revoked, "path[0]"},
		{"reserve at the root", reserve(res(J, root)), "", ""},
	})
	if ps := l.Policies(); len(ps) != 1 || ps[0].ID != pol.ID {
		t.Fatalf("policies: %v", ps)
	}
	if !l.Revoked(pol.ID) || !l.Revoked(kids[0].ID) || l.Revoked(root.ID) {
		t.Fatal("revoked: the policy and its child, not the grant it holds")
	}
}

func TestClosed(t *testing.T) {
	l, _ := open(t, newClock().now)
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	l.Close()
	if err := l.Admit(tr.r); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("admit after close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
