package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// rootGrant is a root grant by k to aud with a CPU ceiling of j joules.
func rootGrant(t *testing.T, k key.Private, aud key.Public, j int64, now time.Time) *jcp.Token {
	return rootGrantB(t, k, aud, j, now)
}

func rootGrantB(t testing.TB, k key.Private, aud key.Public, j int64, now time.Time) *jcp.Token {
	t.Helper()
	g := &jcp.Grant{Aud: aud, Iat: uint64(now.Unix()) - 60, Exp: uint64(now.Unix()) + 3600, Depth: 1,
		Images: []addr.Addr{addr.Of([]byte("image"))}, Ceilings: map[device.Class]energy.Microjoules{device.CPU: energy.Microjoules(j * 1e6)}}
	tok, err := jcp.Seal(g, k)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func sharedLedger(t *testing.T, m *Member, roots key.Trust, now time.Time) *budget.Ledger {
	t.Helper()
	return sharedLedgerAt(t, m, roots, now, filepath.Join(t.TempDir(), "seen"))
}

// sharedLedgerAt opens the cluster's ledger for m, keeping the longest
// log it saw in seen.
func sharedLedgerAt(t *testing.T, m *Member, roots key.Trust, now time.Time, seen string) *budget.Ledger {
	t.Helper()
	l, err := budget.OpenShared(m.Chain(LedgerName, budget.Genesis()), roots, func() time.Time { return now }, seen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func reserve(l *budget.Ledger, root *jcp.Token, j int64, inv string, now time.Time) (uint64, error) {
	return l.Reserve(budget.Reservation{Path: []addr.Addr{root.ID}, UJ: map[device.Class]energy.Microjoules{device.CPU: energy.Microjoules(j * 1e6)},
		Invocation: addr.Of([]byte(inv)), Until: now.Add(time.Hour)})
}

func spent(t *testing.T, l *budget.Ledger, id addr.Addr) (reserved, spent energy.Microjoules) {
	t.Helper()
	b, ok := l.Budget(id)
	if !ok || len(b.Classes) != 1 {
		t.Fatalf("budget of %s: %+v %v", id, b, ok)
	}
	return b.Classes[0].Reserved, b.Classes[0].Spent
}

// TestJCPLedgerSharedAcrossHosts: the hosts of a cluster keep one JCP
// budget ledger in PostgreSQL. What one host admits, reserves, posts
// and revokes, another decides against: a grant's ceiling holds across
// hosts (also when twenty reservations race on two hosts), a replayed
// invocation is refused on the other host, reservation numbers are the
// cluster's; the ledger read back verifies offline (budget.Verify) to
// the same budgets; an entry edited by hand, and a host that trusts
// other roots, are refused, saying why.
func TestJCPLedgerSharedAcrossHosts(t *testing.T) {
	ctx := context.Background()
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	now := time.Unix(1_800_000_000, 0)
	root, _ := key.Generate(rand.Reader)
	user, _ := key.Generate(rand.Reader)
	roots := key.NewTrust(root.Public())
	la, lb := sharedLedger(t, a, roots, now), sharedLedger(t, b, roots, now)

	g := rootGrant(t, root, user.Public(), 10, now)
	if err := la.Admit(g); err != nil {
		t.Fatal(err)
	}
	n1, err := reserve(lb, g, 6, "inv 1", now) // b sees a's admission
	if err != nil || n1 != 1 {
		t.Fatalf("b reserves 6 J: %d %v", n1, err)
	}
	if _, err := reserve(la, g, 6, "inv 2", now); !errors.Is(err, reject.OverCeiling) {
		t.Fatalf("a reserves 6 J more of a 10 J grant b holds 6 of: %v", err)
	}
	n2, err := reserve(la, g, 4, "inv 2", now)
	if err != nil || n2 != 2 {
		t.Fatalf("a reserves 4 J: %d %v", n2, err)
	}
	if _, err := reserve(la, g, 1, "inv 1", now); !errors.Is(err, reject.Replay) {
		t.Fatalf("b's invocation again on a: %v", err)
	}
	if err := la.Post(n1, map[device.Class]energy.Microjoules{device.CPU: 3e6}, addr.Of([]byte("run 1"))); err != nil {
		t.Fatalf("a posts b's reservation: %v", err)
	}
	if r, s := spent(t, lb, g.ID); r != 4e6 || s != 3e6 {
		t.Fatalf("b reads reserved %d spent %d, want 4 J and 3 J", r, s)
	}

	// Twenty reservations of 1 J race on both hosts for a 10 J grant:
	// ten are granted.
	g2 := rootGrant(t, root, user.Public(), 10, now.Add(time.Second))
	if err := lb.Admit(g2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, refused := 0, 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := la
			if i%2 == 1 {
				l = lb
			}
			_, err := reserve(l, g2, 1, "race "+string(rune('a'+i)), now)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				granted++
			case errors.Is(err, reject.OverCeiling):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if granted != 10 || refused != 10 {
		t.Fatalf("20 racing reservations of 1 J on a 10 J grant: %d granted, %d refused", granted, refused)
	}

	// Read back, it verifies offline to the same budgets, and a host
	// opening it afresh replays the same.
	log, head, err := c.ChainBytes(ctx, LedgerName, budget.Genesis())
	if err != nil {
		t.Fatal(err)
	}
	st, err := budget.Verify(log, nil, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	if size, h := st.Head(); h != head || size != uint64(bytes.Count(log, []byte("\n"))) {
		t.Fatalf("verified head %d %s, the chain's %s", size, h, head)
	}
	if sa, sb := la.Tree(), lb.Tree(); len(sa) != 2 || !sameBudgets(sa, sb) || !sameBudgets(sa, st.Tree()) {
		t.Fatalf("budgets differ: a %+v, b %+v, verified %+v", sa, sb, st.Tree())
	}
	if r, _ := spent(t, la, g2.ID); r != 10e6 {
		t.Fatalf("reserved of the raced grant %d, want 10 J", r)
	}

	// A host trusting other roots cannot follow the ledger, and says why.
	other, _ := key.Generate(rand.Reader)
	d := join(t, c, "d")
	if _, err := budget.OpenShared(d.Chain(LedgerName, budget.Genesis()), key.NewTrust(other.Public()), nil, ""); err == nil || !strings.Contains(err.Error(), "same JCP roots") {
		t.Fatalf("a host with other roots: %v", err)
	}
	// An entry edited by hand is refused, on open and when read back.
	exec(t, c, `UPDATE cluster_chain_entries SET line = convert_to(replace(convert_from(line, 'UTF8'), '"reserve"', '"reserve" '), 'UTF8') WHERE name = $1 AND seq = 2`, LedgerName)
	if _, err := budget.OpenShared(d.Chain(LedgerName, budget.Genesis()), roots, nil, ""); !errors.Is(err, ErrForged) {
		t.Fatalf("an edited entry, on open: %v", err)
	}
	if _, _, err := c.ChainBytes(ctx, LedgerName, budget.Genesis()); !errors.Is(err, ErrForged) {
		t.Fatalf("an edited entry, read back: %v", err)
	}
}

func sameBudgets(a, b []budget.Budget) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Grant != b[i].Grant || a[i].Runs != b[i].Runs || len(a[i].Classes) != len(b[i].Classes) {
			return false
		}
		for j := range a[i].Classes {
			if a[i].Classes[j] != b[i].Classes[j] {
				return false
			}
		}
	}
	return true
}

// BenchmarkSharedLedgerReserve: reservations per second in a ledger
// two hosts share (each change one transaction on PostgreSQL, fsync on),
// alternating hosts (each catches up with the other's entry first) and
// from one host alone.
func BenchmarkSharedLedgerReserve(b *testing.B) {
	for _, alternate := range []bool{false, true} {
		name := "one-host"
		if alternate {
			name = "two-hosts-alternating"
		}
		b.Run(name, func(b *testing.B) {
			c, err := Open(context.Background(), server.NewDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			a, o := join(b, c, "a"), join(b, c, "b")
			now := time.Unix(1_800_000_000, 0)
			root, _ := key.Generate(rand.Reader)
			roots := key.NewTrust(root.Public())
			la, err := budget.OpenShared(a.Chain(LedgerName, budget.Genesis()), roots, func() time.Time { return now }, filepath.Join(b.TempDir(), "a"))
			if err != nil {
				b.Fatal(err)
			}
			defer la.Close()
			lb, err := budget.OpenShared(o.Chain(LedgerName, budget.Genesis()), roots, func() time.Time { return now }, filepath.Join(b.TempDir(), "b"))
			if err != nil {
				b.Fatal(err)
			}
			defer lb.Close()
			g := rootGrantB(b, root, root.Public(), 1<<30, now)
			if err := la.Admit(g); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				l := la
				if alternate && i%2 == 1 {
					l = lb
				}
				if _, err := reserve(l, g, 1, fmt.Sprint("inv ", i), now); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reservations/s")
		})
	}
}
