package budget

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

var now = time.Unix(1_800_000_000, 0)

// principal is the key of seed n: k1 the trusted root, k9 the host.
func principal(t testing.TB, n byte) key.Private {
	t.Helper()
	k, err := key.FromSeed(bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func trust(t testing.TB) key.Trust { return key.NewTrust(principal(t, 1).Public()) }

func host(t testing.TB) key.Private { return principal(t, 9) }

var img = addr.Of([]byte("image"))

const J = energy.Microjoules(1e6)

func cpu(uj energy.Microjoules) map[device.Class]energy.Microjoules {
	return map[device.Class]energy.Microjoules{device.CPU: uj}
}

func seal(t testing.TB, v any, k key.Private) *jcp.Token {
	t.Helper()
	tok, err := jcp.Seal(v, k)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// grantOf is a grant by from to to under parent (nil: a root), with
// ceilings and caveats, one delegation deep per level below depth.
func grantOf(t testing.TB, from key.Private, to key.Public, parent *jcp.Token, depth uint64, ceilings map[device.Class]energy.Microjoules, cv jcp.Caveats) *jcp.Token {
	t.Helper()
	g := &jcp.Grant{Aud: to, Iat: uint64(now.Unix()) - 60, Exp: uint64(now.Unix()) + 3600, Depth: depth,
		Images: []addr.Addr{img}, Ceilings: ceilings, Caveats: cv}
	if parent != nil {
		g.Parent = &parent.ID
		g.Exp = parent.Grant.Exp
	}
	return seal(t, g, from)
}

// tree is a root (k1 → k2), its child (k2 → k3) and grandchild (k3 → k4).
type tree struct{ r, c, g *jcp.Token }

func newTree(t testing.TB, r, c, g energy.Microjoules, cv jcp.Caveats) tree {
	k1, k2, k3, k4 := principal(t, 1), principal(t, 2), principal(t, 3), principal(t, 4)
	var tr tree
	tr.r = grantOf(t, k1, k2.Public(), nil, 3, cpu(r), cv)
	tr.c = grantOf(t, k2, k3.Public(), tr.r, 2, cpu(c), cv)
	tr.g = grantOf(t, k3, k4.Public(), tr.c, 1, cpu(g), cv)
	return tr
}

func (tr tree) tokens() []*jcp.Token { return []*jcp.Token{tr.r, tr.c, tr.g} }

// clock is a fake clock, safe for concurrent use.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(now.UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// open opens a ledger in a new directory, signed by the host, on a fake
// clock; it is closed and verified at the end of the test.
func open(t testing.TB, clock func() time.Time) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := Open(path, trust(t), host(t), clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAndVerify(t, l, path) })
	return l, path
}

// closeAndVerify closes l and checks that a verifier replaying its file
// and heads sees what it saw.
func closeAndVerify(t testing.TB, l *Ledger, path string) {
	t.Helper()
	tree, out := l.Tree(), l.Outstanding()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := verifyFile(t, path)
	if got := st.Tree(); !reflect.DeepEqual(got, tree) {
		t.Fatalf("a verifier's budgets are not the ledger's:\n%+v\n%+v", got, tree)
	}
	if got := st.Outstanding(); !reflect.DeepEqual(got, out) {
		t.Fatalf("a verifier's outstanding reservations are not the ledger's:\n%+v\n%+v", got, out)
	}
}

func verifyFile(t testing.TB, path string) *State {
	t.Helper()
	log, _ := os.ReadFile(path)
	heads, _ := os.ReadFile(path + ".heads")
	pub := host(t).Public()
	st, err := Verify(log, heads, trust(t), &pub)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return st
}

var invs atomic.Uint64

// inv is a fresh invocation id.
func inv() addr.Addr {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], invs.Add(1))
	return addr.Of(b[:])
}

func path(ts ...*jcp.Token) []addr.Addr {
	out := make([]addr.Addr, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func res(uj energy.Microjoules, ts ...*jcp.Token) Reservation {
	return Reservation{Path: path(ts...), UJ: cpu(uj), Invocation: inv(), Until: now.Add(time.Hour)}
}

// refused checks err is a refusal with code (none: nil) at a location
// ending in where.
func refused(t testing.TB, what string, err error, code reject.Code, where string) {
	t.Helper()
	if code == "" {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	var re *reject.Error
	if !errors.As(err, &re) || re.Code != code || !strings.HasSuffix(re.Where, where) {
		t.Fatalf("%s: %v, want %s at …%s", what, err, code, where)
	}
}

func budgetOf(t testing.TB, l *Ledger, g *jcp.Token) Budget {
	t.Helper()
	b, ok := l.Budget(g.ID)
	if !ok {
		t.Fatalf("no budget for %s", g.ID)
	}
	return b
}

// cpuOf is a budget's CPU line.
func cpuOf(b Budget) ClassBudget {
	for _, c := range b.Classes {
		if c.Class == device.CPU {
			return c
		}
	}
	return ClassBudget{}
}

// readLines is the entries of the log at path.
func readLines(t testing.TB, path string) ([]string, int, error) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	es, torn, err := chain.Split(b)
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e)
	}
	return out, torn, err
}
