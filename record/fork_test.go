package record

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

func forked(p Parent, s Snapshot) Segment { return Segment{Kind: Forked, Parent: &p, Snapshot: s} }

// TestForkedSegment: a fork's record begins with its genesis and a
// forked segment, which leaves it parked at the snapshot it names: it
// runs once resumed from that snapshot, and only from that one.
func TestForkedSegment(t *testing.T) {
	parent := Parent{Record: "sb-0123456789ab", Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))}
	seg := forked(parent, snapA)
	b, err := seg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"forked","parent":{"genesis":"` + parent.Genesis.String() + `","head":"` + parent.Head.String() + `","record":"sb-0123456789ab"},"snapshot":{"manifest":"` + snapA.Manifest.String() + `","root":"` + snapA.Root.String() + `"}}`
	if string(b) != want {
		t.Fatalf("wire form\n%s\nwant\n%s", b, want)
	}
	back, err := ParseSegment(b)
	if err != nil || *back.Parent != parent || !back.Snapshot.Equal(snapA) {
		t.Fatalf("read back: %+v %v", back, err)
	}
	st := New(Header{Record: Domain, Unit: unit, Grants: grants})
	if err := st.Apply(seg, b); err != nil {
		t.Fatal(err)
	}
	if st.Phase != Parked || !st.Last.Equal(snapA) {
		t.Fatalf("after forked: %+v", st)
	}
	for _, tc := range []struct {
		name string
		seg  Segment
		code reject.Code
	}{
		{"executed before its resumption", executed("1"), reject.Phase},
		{"resumed from another snapshot", resume(snapB, 0), reject.SnapshotMismatch},
		{"forked twice", seg, reject.Phase},
	} {
		c := st
		if err := c.Check(tc.seg); !errors.Is(err, tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if err := st.Check(resume(snapA, 0)); err != nil {
		t.Fatalf("resumed from the forked snapshot: %v", err)
	}
	// Only as the first segment.
	late := New(Header{Record: Domain, Unit: unit, Grants: grants})
	eb, _ := executed("1").Bytes()
	late.Apply(executed("1"), eb)
	if err := late.Check(seg); !errors.Is(err, reject.Phase) {
		t.Fatalf("forked after an exec: %v", err)
	}
}

// Bad forked segments are refused with the code that names what is
// wrong, never read as something else.
func TestForkedSegmentRefused(t *testing.T) {
	ok, _ := forked(Parent{Record: "sb-0123456789ab", Genesis: addr.Of([]byte("g")), Head: addr.Of([]byte("h"))}, snapA).Bytes()
	zero := addr.Addr{}.String()
	for _, tc := range []struct {
		name, old, new string
		code           reject.Code
	}{
		{"no sandbox id", `"record":"sb-0123456789ab"`, `"record":"parent"`, reject.Invalid},
		{"an empty id", `"record":"sb-0123456789ab"`, `"record":""`, reject.MissingField},
		{"a zero head", `"head":"` + addr.Of([]byte("h")).String(), `"head":"` + zero, reject.MissingField},
		{"a zero genesis", `"genesis":"` + addr.Of([]byte("g")).String(), `"genesis":"` + zero, reject.MissingField},
		{"a zero root", `"root":"` + snapA.Root.String(), `"root":"` + zero, reject.MissingField},
		{"no parent", `"parent":{"genesis":"` + addr.Of([]byte("g")).String() + `","head":"` + addr.Of([]byte("h")).String() + `","record":"sb-0123456789ab"},`, ``, reject.MissingField},
		{"an unknown member", `"kind":"forked"`, `"kind":"forked","note":"x"`, reject.UnknownField},
	} {
		b := strings.Replace(string(ok), tc.old, tc.new, 1)
		if b == string(ok) {
			t.Fatalf("%s: nothing replaced", tc.name)
		}
		if _, err := ParseSegment([]byte(b)); !errors.Is(err, tc.code) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if _, err := (Segment{Kind: Forked, Snapshot: snapA}).Bytes(); !errors.Is(err, reject.MissingField) {
		t.Fatalf("a forked segment without its parent written: %v", err)
	}
}

// ForkedFrom holds a fork's cited parent to the parent's record: the
// same genesis, a head it had (it may have grown since), and nothing
// else.
func TestForkedFrom(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parent.jsonl")
	f, err := Create(path, unit, grants)
	if err != nil {
		t.Fatal(err)
	}
	f.Append(executed("1"))
	at := f.State().Head
	f.Append(executed("2")) // it ran on after the fork
	f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := Genesis(unit, grants)
	if _, err := ForkedFrom(b, Parent{Record: "sb-0123456789ab", Genesis: g, Head: at}); err != nil {
		t.Fatalf("the parent as cited: %v", err)
	}
	if _, err := ForkedFrom(b, Parent{Record: "sb-0123456789ab", Genesis: g, Head: addr.Of([]byte("never"))}); !errors.Is(err, reject.HeadMismatch) {
		t.Fatalf("a head it never had: %v", err)
	}
	if _, err := ForkedFrom(b, Parent{Record: "sb-0123456789ab", Genesis: addr.Of([]byte("other")), Head: at}); !errors.Is(err, reject.Splice) {
		t.Fatalf("another record's genesis: %v", err)
	}
}
