package budget

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/reject"
)

// sample writes a small ledger (a tree, reservations, a post, a release,
// a revocation) with a head signed midway and at Close, and returns its
// path and tree.
func sample(t testing.TB) (string, tree) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := Open(path, trust(t), host(t), newClock().now)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Admit(tr.tokens()...))
	for range 3 {
		_, err := l.Reserve(res(J, tr.g, tr.c, tr.r))
		must(err)
	}
	_, err = l.SignHead()
	must(err)
	must(l.Post(1, cpu(2*J), addr.Of([]byte("run"))))
	must(l.Release(2, WhyFailed))
	must(l.Revoke(seal(t, &jcp.Revocation{Grant: tr.g.ID, Iat: 1}, principal(t, 3))))
	must(l.Close())
	return path, tr
}

// A write cut short leaves a line without its newline: it was never
// acknowledged, so Open cuts it (as every chain log does) and a verifier,
// given a ledger at rest, refuses it.
func TestTornLastLine(t *testing.T) {
	path, tr := sample(t)
	whole, _ := os.ReadFile(path)
	torn := append(append([]byte{}, whole...), `{"at":"18000`...)
	os.WriteFile(path, torn, 0o600)
	if _, err := Verify(torn, nil, trust(t), nil); reject.CodeOf(err) != reject.Truncated || !strings.Contains(err.Error(), "entry 10") {
		t.Fatalf("verify of a torn ledger: %v", err)
	}
	l, err := Open(path, trust(t), host(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, whole) {
		t.Fatal("open did not cut the torn line")
	}
	if _, err := l.Reserve(res(J, tr.c, tr.r)); err != nil {
		t.Fatal(err)
	}
	closeAndVerify(t, l, path)
}

// A ledger cut short or rewritten after a head was signed: head-mismatch.
func TestSignedHeads(t *testing.T) {
	path, _ := sample(t)
	log, _ := os.ReadFile(path)
	heads, _ := os.ReadFile(path + ".heads")
	if n := strings.Count(string(heads), "\n— "+Domain+" "); n != 2 {
		t.Fatalf("%d signed heads; want the one signed midway and Close's:\n%s", n, heads)
	}
	pub, other := host(t).Public(), principal(t, 8).Public()
	lines := strings.SplitAfter(string(log), "\n")
	// The post and the release after the first head, swapped: each rule
	// still holds, and the head signed after them is not reached.
	rewritten := strings.Join(append(append([]string{}, lines[:6]...), lines[7], lines[6]), "")
	rewritten += strings.Join(lines[8:], "")
	for _, tc := range []struct {
		name       string
		log, heads []byte
		code       reject.Code
	}{
		{"whole", log, heads, ""},
		{"no heads", log, nil, ""},
		{"cut short by one entry", []byte(strings.Join(lines[:len(lines)-2], "")), heads, reject.HeadMismatch},
		{"cut to before the first head", []byte(strings.Join(lines[:4], "")), heads, reject.HeadMismatch},
		{"emptied", nil, heads, reject.HeadMismatch},
		{"a post and a release swapped", []byte(rewritten), heads, reject.HeadMismatch},
		{"a head's text changed", log, bytes.Replace(heads, []byte("\n6\n"), []byte("\n5\n"), 1), reject.Signature},
		{"a torn head", log, heads[:len(heads)-10], reject.Truncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.log, tc.heads, trust(t), &pub)
			refused(t, "verify", err, tc.code, "")
			if tc.code != reject.HeadMismatch {
				return
			}
			if _, err := Verify(tc.log, tc.heads, trust(t), nil); reject.CodeOf(err) != reject.HeadMismatch {
				t.Fatalf("without the signer's key: %v", err)
			}
			p := filepath.Join(t.TempDir(), "ledger.jsonl")
			os.WriteFile(p, tc.log, 0o600)
			os.WriteFile(p+".heads", tc.heads, 0o600)
			if _, err := Open(p, trust(t), host(t), time.Now); reject.CodeOf(err) != reject.HeadMismatch {
				t.Fatalf("open: %v", err)
			}
		})
	}
	if _, err := Verify(log, heads, trust(t), &other); reject.CodeOf(err) != reject.UntrustedKey {
		t.Fatalf("heads checked against another key: %v", err)
	}
	// A head note cut short by a crash was never returned: Open cuts it.
	os.WriteFile(path+".heads", heads[:len(heads)-10], 0o600)
	l, err := Open(path, trust(t), host(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path + ".heads"); strings.Count(string(b), "\n— ") != 1 || !bytes.HasPrefix(heads, b) {
		t.Fatalf("open did not cut the torn head:\n%s", b)
	}
	closeAndVerify(t, l, path)
}

// hostile is a ledger's first entry (admitting a root) and lines to put
// after it that must be refused at line 2, naming what is wrong.
func hostile(t testing.TB) (first string, lines []struct {
	line string
	code reject.Code
}) {
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	first = `{"op":"admit","token":"` + b64.EncodeToString(tr.r.Bytes) + `"}`
	r, c := tr.r.ID.String(), tr.c.ID.String()
	inv := addr.Of([]byte("i")).String()
	reserve := func(n, p, uj string) string {
		return `{"at":"1","inv":"` + inv + `","n":` + n + `,"op":"reserve","path":[` + p + `],"uj":` + uj + `,"until":"2"}`
	}
	rev := seal(t, &jcp.Revocation{Grant: tr.r.ID, Iat: 1}, principal(t, 1))
	lines = []struct {
		line string
		code reject.Code
	}{
		{`not json`, reject.Malformed},
		{`{"op":"burn"}`, reject.Invalid},
		{`{"op": "post"}`, reject.NonCanonical},
		{`{"n":1,"op":"post","run":"` + inv + `","uj":{}}`, reject.DoubleSpend},
		{`{"n":1,"op":"release","why":"failed"}`, reject.DoubleSpend},
		{reserve("1", `"`+c+`","`+r+`"`, `{"Cpu":1}`), reject.BrokenChain},
		{reserve("1", `"`+r+`"`, `{"Cpu":1}`), ""},
		{reserve("2", `"`+r+`"`, `{"Cpu":1}`), reject.Invalid},
		{reserve("1", `"`+r+`"`, `{"Gpu":1}`), reject.ClassNotGranted},
		{reserve("1", `"`+r+`"`, `{"cpu":1}`), reject.Invalid},
		{reserve("1", `"`+r+`"`, `{"Cpu":0}`), reject.Invalid},
		{reserve("1", `"`+r+`"`, `{"Cpu":100000001}`), reject.OverCeiling},
		{reserve("1", `"`+r+`"`, `{"Cpu":9007199254740993}`), reject.IntRange},
		{reserve("1", `"`+r+`"`, `{"Cpu":1.5}`), reject.Float},
		{reserve("1", ``, `{"Cpu":1}`), reject.BrokenChain},
		{strings.Replace(reserve("1", `"`+r+`"`, `{"Cpu":1}`), `"at":"1"`, `"at":"01"`, 1), reject.Invalid},
		{strings.Replace(reserve("1", `"`+r+`"`, `{"Cpu":1}`), `"at":"1"`, `"at":1`, 1), reject.Invalid},
		{strings.Replace(reserve("1", `"`+r+`"`, `{"Cpu":1}`), `"at":"1",`, ``, 1), reject.MissingField},
		{strings.Replace(reserve("1", `"`+r+`"`, `{"Cpu":1}`), `"until":"2"`, `"until":"2","x":1`, 1), reject.UnknownField},
		{`{"op":"admit"}`, reject.MissingField},
		{`{"op":"admit","token":"!!"}`, reject.Invalid},
		{`{"op":"admit","token":"AAAA"}`, reject.Malformed},
		{first, reject.Invalid},
		{`{"op":"admit","token":"` + b64.EncodeToString(rev.Bytes) + `"}`, reject.Invalid},
		{`{"op":"revoke","token":"` + b64.EncodeToString(tr.r.Bytes) + `"}`, reject.Invalid},
		{`{"op":"admit","token":"` + b64.EncodeToString(tr.g.Bytes) + `"}`, reject.BrokenChain},
		{`[]`, reject.Invalid},
		{`{"op":1}`, reject.Invalid},
		{`{"op":null}`, reject.Invalid},
		{`{}`, reject.MissingField},
		{`{"OP":"admit"}`, reject.MissingField},
	}
	return first, lines
}

func TestHostileLines(t *testing.T) {
	first, lines := hostile(t)
	for _, tc := range lines {
		log := []byte(first + "\n" + tc.line + "\n")
		_, err := Verify(log, nil, trust(t), nil)
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.line, err)
			}
			continue
		}
		if reject.CodeOf(err) != tc.code || !strings.HasPrefix(err.Error(), "entry 2: ") {
			t.Errorf("%.80s: %v, want entry 2: %s", tc.line, err, tc.code)
			continue
		}
		p := filepath.Join(t.TempDir(), "ledger.jsonl")
		os.WriteFile(p, log, 0o600)
		if _, err := Open(p, trust(t), host(t), time.Now); reject.CodeOf(err) != tc.code || !strings.Contains(err.Error(), p+": entry 2: ") {
			t.Errorf("open %.80s: %v", tc.line, err)
		}
	}
	if _, err := Verify([]byte("\n"), nil, trust(t), nil); reject.CodeOf(err) != reject.Malformed || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("an empty line: %v", err)
	}
}

var fuzzSeeds struct {
	once  sync.Once
	log   []byte
	heads []byte
	lines []string
}

func FuzzVerify(f *testing.F) {
	fuzzSeeds.once.Do(func() {
		path, _ := sample(f)
		fuzzSeeds.log, _ = os.ReadFile(path)
		fuzzSeeds.heads, _ = os.ReadFile(path + ".heads")
	})
	first, lines := hostile(f)
	f.Add(fuzzSeeds.log, fuzzSeeds.heads)
	f.Add(fuzzSeeds.log, []byte(nil))
	for _, tc := range lines {
		f.Add([]byte(first+"\n"+tc.line+"\n"), []byte(nil))
	}
	roots, pub := trust(f), host(f).Public()
	f.Fuzz(func(t *testing.T, log, heads []byte) {
		st, err := Verify(log, heads, roots, &pub)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("a refusal without a code: %v", err)
			}
			return
		}
		// What verifies has budgets for every grant it admitted.
		for _, b := range st.Tree() {
			if _, ok := st.Budget(b.Grant); !ok {
				t.Fatal("a grant of the tree has no budget")
			}
		}
		st.Outstanding()
	})
}

// The independent verifier (conformance/independent/jcp.py, written from
// the spec alone) replays what this ledger writes to the same head and
// the same budgets.
func TestIndependentVerifierAgrees(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not here")
	}
	const script = "../../conformance/independent/jcp.py"
	if _, err := os.Stat(script); err != nil {
		t.Skip("no independent verifier")
	}
	minting, _ := sample(t)
	mints := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := Open(mints, trust(t), host(t), newClock().now)
	if err != nil {
		t.Fatal(err)
	}
	root, pol := mintSetup(t, l, 5, jcp.Rate{N: 2, Per: 60})
	kids := minted(t, root, pol, 3)
	for _, k := range kids {
		l.Mint(k, "event:push")
	}
	if _, err := l.Reserve(res(J, kids[0], root)); err != nil {
		t.Fatal(err)
	}
	if err := l.Revoke(seal(t, &jcp.Revocation{Grant: pol.ID, Iat: 1}, principal(t, 2))); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, path := range []string{minting, mints} {
		out, err := exec.Command(py, script, "--ledger", path, "--root", principal(t, 1).Public().String()).CombinedOutput()
		if err != nil {
			t.Fatalf("jcp.py: %v\n%s", err, out)
		}
		st := verifyFile(t, path)
		_, head := st.Head()
		var want []string
		for _, b := range st.Tree() {
			line := "grant " + b.Grant.String()
			if b.Revoked {
				line += " revoked"
			}
			want = append(want, line)
			for _, c := range b.Classes {
				want = append(want, fmt.Sprintf("  %-8s ceiling %d reserved %d spent %d remaining %d", c.Class, c.Ceiling, c.Reserved, c.Spent, c.Remaining))
			}
		}
		got := strings.Split(strings.TrimSpace(string(out)), "\n")
		if last := got[len(got)-1]; !strings.HasSuffix(last, "head "+head.String()) {
			t.Fatalf("jcp.py reaches another head: %s; ours %s", last, head)
		}
		got = got[:len(got)-1]
		if !sameBudgets(got, want) {
			t.Fatalf("jcp.py's budgets:\n%s\nours:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// sameBudgets compares two listings of grants and their class lines as
// sets of grant blocks.
func sameBudgets(a, b []string) bool {
	block := func(ls []string) []string {
		var out []string
		for _, l := range ls {
			if strings.HasPrefix(l, "grant ") || len(out) == 0 {
				out = append(out, l)
			} else {
				out[len(out)-1] += "\n" + l
			}
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(block(a), block(b))
}
