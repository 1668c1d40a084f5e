package record

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

func exposed(port int, token string, until int64) Segment {
	return Segment{Kind: Exposed, Port: port, Preview: addr.Of([]byte(token)), Until: until}
}

func unexposed(port int, token, reason string) Segment {
	return Segment{Kind: Unexposed, Port: port, Preview: addr.Of([]byte(token)), Reason: reason}
}

// The wire forms are the spec's, read back the same, by the strict
// decoder: the fast path leaves both kinds to it.
func TestPreviewSegmentWire(t *testing.T) {
	p := addr.Of([]byte("token 1"))
	for _, tc := range []struct {
		seg  Segment
		want string
	}{
		{exposed(8080, "token 1", 1767225600), `{"kind":"exposed","port":8080,"preview":"` + p.String() + `","until":1767225600}`},
		{unexposed(8080, "token 1", "revoked"), `{"kind":"unexposed","port":8080,"preview":"` + p.String() + `","reason":"revoked"}`},
		{exposed(1, "token 1", MaxUntil), `{"kind":"exposed","port":1,"preview":"` + p.String() + `","until":9007199254740991}`},
		{unexposed(MaxPort, "token 1", strings.Repeat("r", MaxReason)), `{"kind":"unexposed","port":65535,"preview":"` + p.String() + `","reason":"` + strings.Repeat("r", MaxReason) + `"}`},
	} {
		b, err := tc.seg.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Fatalf("wire form\n%s\nwant\n%s", b, tc.want)
		}
		if _, ok := fastSegment(b); ok {
			t.Errorf("%s: the fast path took a kind it does not know", b)
		}
		back, err := ParseSegment(b)
		if err != nil || !reflect.DeepEqual(back, tc.seg) {
			t.Fatalf("read back %+v %v, want %+v", back, err, tc.seg)
		}
	}
}

// Bad exposed and unexposed segments are refused with the code that
// names what is wrong, whether written by Bytes or read from a line.
func TestPreviewSegmentRefused(t *testing.T) {
	ex, _ := exposed(8080, "token 1", 1767225600).Bytes()
	un, _ := unexposed(8080, "token 1", "revoked").Bytes()
	p, zero := addr.Of([]byte("token 1")).String(), addr.Addr{}.String()
	for _, tc := range []struct {
		name     string
		line     []byte
		old, new string
		code     reject.Code
	}{
		{"port 0", ex, `"port":8080`, `"port":0`, reject.Invalid},
		{"port 65536", ex, `"port":8080`, `"port":65536`, reject.Invalid},
		{"a negative port", ex, `"port":8080`, `"port":-1`, reject.Invalid},
		{"a port as a string", ex, `"port":8080`, `"port":"8080"`, reject.Invalid},
		{"a port with a fraction", ex, `"port":8080`, `"port":8080.5`, reject.Float},
		{"no port", ex, `"port":8080,`, ``, reject.MissingField},
		{"until 0", ex, `"until":1767225600`, `"until":0`, reject.IntRange},
		{"a negative until", ex, `"until":1767225600`, `"until":-1`, reject.IntRange},
		{"until 2^53", ex, `"until":1767225600`, `"until":9007199254740992`, reject.IntRange},
		{"no until", ex, `,"until":1767225600`, ``, reject.MissingField},
		{"a zero preview", ex, p, zero, reject.MissingField},
		{"no preview", ex, `"preview":"` + p + `",`, ``, reject.MissingField},
		{"not an address", ex, p, "token 1", reject.Invalid},
		{"an unknown member", ex, `"kind":"exposed"`, `"kind":"exposed","note":"x"`, reject.UnknownField},
		{"a reason on an exposure", ex, `"preview":"` + p + `"`, `"preview":"` + p + `","reason":"x"`, reject.UnknownField},
		{"no reason", un, `,"reason":"revoked"`, ``, reject.MissingField},
		{"an empty reason", un, `"reason":"revoked"`, `"reason":""`, reject.MissingField},
		{"a reason of 201 bytes", un, `"reason":"revoked"`, `"reason":"` + strings.Repeat("r", MaxReason+1) + `"`, reject.Invalid},
		{"an until on a withdrawal", un, `"reason":"revoked"`, `"reason":"revoked","until":1`, reject.UnknownField},
		{"a withdrawal of port 0", un, `"port":8080`, `"port":0`, reject.Invalid},
		{"a withdrawal of a zero preview", un, p, zero, reject.MissingField},
	} {
		b := strings.Replace(string(tc.line), tc.old, tc.new, 1)
		if b == string(tc.line) {
			t.Fatalf("%s: nothing replaced", tc.name)
		}
		if _, err := ParseSegment([]byte(b)); !errors.Is(err, tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	for _, tc := range []struct {
		name string
		seg  Segment
		code reject.Code
	}{
		{"port 0", exposed(0, "t", 1), reject.Invalid},
		{"port 65536", exposed(MaxPort+1, "t", 1), reject.Invalid},
		{"until 0", exposed(80, "t", 0), reject.IntRange},
		{"until 2^53", exposed(80, "t", MaxUntil+1), reject.IntRange},
		{"a zero preview", Segment{Kind: Exposed, Port: 80, Until: 1}, reject.MissingField},
		{"no reason", unexposed(80, "t", ""), reject.MissingField},
		{"a long reason", unexposed(80, "t", strings.Repeat("é", 101)), reject.Invalid},
	} {
		if _, err := tc.seg.Bytes(); !errors.Is(err, tc.code) {
			t.Errorf("written, %s: %v, want %s", tc.name, err, tc.code)
		}
	}
}

// The rules of previews, each refusal at the segment that breaks one,
// the same whether the record is replayed or appended to.
func TestPreviewRules(t *testing.T) {
	const until = 1767225600
	ex := func(port int, tok string) Segment { return exposed(port, tok, until) }
	un := func(port int, tok string) Segment { return unexposed(port, tok, "revoked") }
	for _, tc := range []struct {
		name string
		segs []Segment
		code reject.Code // of the last segment; "" when all pass
	}{
		{"exposed, withdrawn", []Segment{executed("1"), ex(8080, "a"), executed("2"), un(8080, "a")}, ""},
		{"exposed first", []Segment{ex(8080, "a")}, ""},
		{"two ports at once", []Segment{ex(8080, "a"), ex(9090, "b"), un(9090, "b"), un(8080, "a")}, ""},
		{"one port twice at once", []Segment{ex(8080, "a"), ex(8080, "b"), un(8080, "a"), un(8080, "b")}, ""},
		{"a new preview after a resumption", []Segment{ex(8080, "a"), suspend(snapA), resume(snapA, 0), ex(8080, "b"), un(8080, "b")}, ""},
		{"left to expire, then closed", []Segment{ex(8080, "a"), Segment{Kind: Closed}}, ""},
		{"closed while open and parked", []Segment{ex(8080, "a"), suspend(snapA), Segment{Kind: Closed}}, ""},
		{"exposed while parked", []Segment{executed("1"), suspend(snapA), ex(8080, "a")}, reject.Phase},
		{"withdrawn while parked", []Segment{ex(8080, "a"), suspend(snapA), un(8080, "a")}, reject.Phase},
		{"exposed in a fork before its resumption", []Segment{forked(Parent{Record: "sb-0123456789ab", Genesis: snapA.Root, Head: snapB.Root}, snapA), ex(8080, "a")}, reject.Phase},
		{"exposed after the close", []Segment{Segment{Kind: Closed}, ex(8080, "a")}, reject.Closed},
		{"an unknown preview withdrawn", []Segment{ex(8080, "a"), un(8080, "b")}, reject.Invalid},
		{"a preview withdrawn twice", []Segment{ex(8080, "a"), un(8080, "a"), un(8080, "a")}, reject.Invalid},
		{"withdrawn on another port", []Segment{ex(8080, "a"), un(9090, "a")}, reject.Invalid},
		{"withdrawn after a suspension ended it", []Segment{ex(8080, "a"), suspend(snapA), resume(snapA, 0), un(8080, "a")}, reject.Invalid},
		{"a preview exposed while open", []Segment{ex(8080, "a"), ex(8080, "a")}, reject.Invalid},
		{"a preview exposed again on another port", []Segment{ex(8080, "a"), ex(9090, "a")}, reject.Invalid},
		{"a withdrawn preview exposed again", []Segment{ex(8080, "a"), un(8080, "a"), ex(8080, "a")}, reject.Invalid},
		{"an ended preview exposed again", []Segment{ex(8080, "a"), suspend(snapA), resume(snapA, 0), ex(8080, "a")}, reject.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := func(err error, i int) {
				t.Helper()
				last := i == len(tc.segs)-1
				switch {
				case last && tc.code != "" && !errors.Is(err, tc.code):
					t.Fatalf("segment %d: %v, want %s", i+1, err, tc.code)
				case (!last || tc.code == "") && err != nil:
					t.Fatalf("segment %d: %v", i+1, err)
				}
			}
			// Replayed.
			entries := [][]byte{[]byte(`{"grants":"` + grants.String() + `","record":"sandbox.runrecord/1","unit":"` + unit.String() + `"}`)}
			for _, s := range tc.segs {
				b, err := s.Bytes()
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, b)
			}
			_, err := Verify(entries)
			if tc.code != "" {
				var re *reject.Error
				if !errors.As(err, &re) || re.Code != tc.code || !strings.HasPrefix(re.Where, fmt.Sprintf("line %d", len(entries))) {
					t.Fatalf("replayed: %v, want %s at line %d", err, tc.code, len(entries))
				}
			} else if err != nil {
				t.Fatalf("replayed: %v", err)
			}
			// Appended.
			f, err := Create(filepath.Join(t.TempDir(), "r.jsonl"), unit, grants)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for i, s := range tc.segs {
				before := f.State()
				_, err := f.Append(s)
				want(err, i)
				if err != nil && !reflect.DeepEqual(f.State(), before) {
					t.Fatalf("a refused segment changed the state")
				}
			}
		})
	}
}

// State.Check alone holds the rules of a preview's life that the state
// knows: the phase, and which previews are open, on which ports.
func TestPreviewCheck(t *testing.T) {
	st := New(Header{Record: Domain, Unit: unit, Grants: grants})
	apply := func(s Segment) {
		t.Helper()
		b, err := s.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Apply(s, b); err != nil {
			t.Fatal(err)
		}
	}
	apply(exposed(8080, "a", 1))
	for _, tc := range []struct {
		name string
		seg  Segment
		code reject.Code
	}{
		{"withdrawn", unexposed(8080, "a", "revoked"), ""},
		{"another preview", exposed(8080, "b", 1), ""},
		{"exposed while open", exposed(8080, "a", 1), reject.Invalid},
		{"withdrawn on another port", unexposed(80, "a", "revoked"), reject.Invalid},
		{"an unknown preview withdrawn", unexposed(8080, "b", "revoked"), reject.Invalid},
	} {
		c := st
		if err := c.Check(tc.seg); (tc.code == "" && err != nil) || (tc.code != "" && !errors.Is(err, tc.code)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.code)
		}
	}
	apply(suspend(snapA))
	c := st
	if err := c.Check(exposed(8080, "b", 1)); !errors.Is(err, reject.Phase) {
		t.Fatalf("exposed while parked: %v", err)
	}
	apply(resume(snapA, 0))
	if err := st.Check(unexposed(8080, "a", "revoked")); !errors.Is(err, reject.Invalid) {
		t.Fatalf("withdrawn after the suspension ended it: %v", err)
	}
}

// Copies of a State share no previews: what one applies, the others
// do not see, even where two copies go on from the same one.
func TestPreviewStateCopies(t *testing.T) {
	st := New(Header{Record: Domain, Unit: unit, Grants: grants})
	step := func(st *State, s Segment) {
		t.Helper()
		b, _ := s.Bytes()
		if err := st.Apply(s, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tok := range []string{"a", "b", "c"} {
		step(&st, exposed(80, tok, 1))
	}
	step(&st, unexposed(80, "c", "revoked")) // room left in the slice
	x, y := st, st
	step(&x, exposed(80, "x", 1))
	step(&y, exposed(80, "y", 1))
	step(&y, unexposed(80, "a", "revoked"))
	if len(st.open) != 2 || len(x.open) != 3 || x.open[2].preview != addr.Of([]byte("x")) || len(y.open) != 2 {
		t.Fatalf("copies share their previews: %v / %v / %v", st.open, x.open, y.open)
	}
	if err := st.Check(unexposed(80, "a", "revoked")); err != nil {
		t.Fatalf("a copy's withdrawal reached the original: %v", err)
	}
	if err := x.Check(unexposed(80, "y", "revoked")); err == nil {
		t.Fatal("a sibling copy's exposure reached another")
	}
	step(&x, suspend(snapA))
	if x.open != nil || len(st.open) != 2 {
		t.Fatalf("a suspension: %v, the original %v", x.open, st.open)
	}
}
