package record

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

var (
	unit   = addr.Of([]byte("unit"))
	grants = addr.Of([]byte("grants"))
	snapA  = Snapshot{Root: addr.Of([]byte("root A")), Manifest: addr.Of([]byte("manifest"))}
	snapB  = Snapshot{Root: addr.Of([]byte("root B")), Manifest: addr.Of([]byte("manifest"))}
)

func executed(n string) Segment { return Segment{Kind: Executed, Attestation: addr.Of([]byte(n))} }
func suspend(s Snapshot) Segment {
	return Segment{Kind: Suspended, Snapshot: s}
}
func resume(s Snapshot, uj uint64) Segment {
	return Segment{Kind: Resumed, Snapshot: s, IdleUJ: uj, IdleProvenance: "Estimator test"}
}

// The genesis and every step are the bytes the spec says.
func TestHeadIsTheSpecsBytes(t *testing.T) {
	h := blake3.New()
	h.Write([]byte("sandbox.runrecord/1"))
	h.Write(unit[:])
	h.Write(grants[:])
	var g addr.Addr
	h.Sum(g[:0])
	if Genesis(unit, grants) != g {
		t.Fatal("head₀ is not BLAKE3(domain ‖ unit ‖ grants) over raw digests")
	}
	st := New(Header{Record: Domain, Unit: unit, Grants: grants})
	seg := executed("a")
	b, err := seg.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"attestation":"`+addr.Of([]byte("a")).String()+`","kind":"executed"}` {
		t.Fatalf("segment bytes %s", b)
	}
	if err := st.Apply(seg, b); err != nil {
		t.Fatal(err)
	}
	want := blake3.Sum256(append(g[:], b...))
	if st.Head != addr.Addr(want) {
		t.Fatal("head₁ is not BLAKE3(head₀ ‖ segment line)")
	}
}

// C6: the chain advances and verifies across execute → suspend →
// resume → execute; idle energy accumulates; close.
func TestRecordLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	f, err := Create(path, unit, grants)
	if err != nil {
		t.Fatal(err)
	}
	heads := []addr.Addr{f.State().Head}
	for _, s := range []Segment{executed("1"), suspend(snapA), resume(snapA, 500), executed("2"), suspend(snapB), resume(snapB, 250), executed("3")} {
		h, err := f.Append(s)
		if err != nil {
			t.Fatalf("%s: %v", s.Kind, err)
		}
		heads = append(heads, h)
	}
	st := f.State()
	if st.Phase != Active || st.Segments != 7 || st.Executed != 3 || st.IdleUJ != 750 {
		t.Fatalf("%+v", st)
	}
	f.Close()
	b, _ := os.ReadFile(path)
	vs, err := VerifyBytes(b)
	if err != nil || vs.Head != heads[len(heads)-1] {
		t.Fatalf("the wire form: %v %s", err, vs.Head)
	}
	// Reopened: replayed to the same head, nothing stored but entries.
	f, err = Open(path)
	if err != nil || f.State().Head != st.Head {
		t.Fatal(err)
	}
	if strings.Contains(string(b), st.Head.Hex()) {
		t.Fatal("the file stores a head")
	}
	if _, err := f.Append(suspend(snapA)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Append(Segment{Kind: Closed, Reason: "abandoned while parked"}); err != nil {
		t.Fatalf("close while parked: %v", err)
	}
	if _, err := f.Append(executed("4")); !errors.Is(err, reject.Closed) {
		t.Fatalf("append after close: %v", err)
	}
	f.Close()
}

// Each rule is refused with its code, and the record is unchanged.
func TestRecordRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		segs []Segment
		code reject.Code
	}{
		{"executed while parked", []Segment{suspend(snapA), executed("x")}, reject.Phase},
		{"suspended while parked", []Segment{suspend(snapA), suspend(snapA)}, reject.Phase},
		{"resumed while active", []Segment{executed("x"), resume(snapA, 0)}, reject.Phase},
		{"a forked snapshot", []Segment{suspend(snapA), resume(snapB, 0)}, reject.SnapshotMismatch},
		{"a snapshot with memory added", []Segment{suspend(snapA), resume(Snapshot{Root: snapA.Root, Manifest: snapA.Manifest, Memory: &snapB.Root}, 0)}, reject.SnapshotMismatch},
		{"after close", []Segment{{Kind: Closed}, executed("x")}, reject.Closed},
		{"close after close", []Segment{{Kind: Closed}, {Kind: Closed}}, reject.Closed},
		{"the same execution twice", []Segment{executed("x"), executed("x")}, reject.Invalid},
		{"the same execution across a suspension", []Segment{executed("x"), suspend(snapA), resume(snapA, 0), executed("x")}, reject.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.jsonl")
			f, err := Create(path, unit, grants)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			last := tc.segs[len(tc.segs)-1]
			for _, s := range tc.segs[:len(tc.segs)-1] {
				if _, err := f.Append(s); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(path)
			if _, err := f.Append(last); !errors.Is(err, tc.code) {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Fatal("a refused segment changed the file")
			}
		})
	}
}

func TestResumePreconditions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	f, err := Create(path, unit, grants)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Append(executed("1"))
	f.Append(suspend(snapA))
	if _, err := f.Resume(snapA, addr.Of([]byte("another toolchain")), 1, "Estimator test"); !errors.Is(err, reject.ManifestMismatch) {
		t.Fatalf("another environment: %v", err)
	}
	if _, err := f.Resume(snapB, snapA.Manifest, 1, "Estimator test"); !errors.Is(err, reject.SnapshotMismatch) {
		t.Fatalf("another snapshot: %v", err)
	}
	if _, err := f.Resume(snapA, snapA.Manifest, 1, "a guess"); !errors.Is(err, reject.Invalid) {
		t.Fatalf("idle energy without its provenance: %v", err)
	}
	if _, err := f.Resume(snapA, snapA.Manifest, 7, "Estimator test"); err != nil {
		t.Fatal(err)
	}
}

// A continuation under other grants is a new run.
func TestCreateRefusesASplice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	f, err := Create(path, unit, grants)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := Create(path, unit, addr.Of([]byte("other grants"))); !errors.Is(err, reject.Splice) {
		t.Fatalf("other grants: %v", err)
	}
	if _, err := Create(path, addr.Of([]byte("other unit")), grants); !errors.Is(err, reject.Splice) {
		t.Fatalf("another unit: %v", err)
	}
	f, err = Create(path, unit, grants)
	if err != nil {
		t.Fatalf("the same unit and grants continue: %v", err)
	}
	f.Close()
}

// A record that does not parse is an error naming the line, never a
// shorter history.
func TestOpenRefusesWhatDoesNotParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	f, _ := Create(path, unit, grants)
	f.Append(executed("1"))
	f.Append(executed("2"))
	f.Close()
	good, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(good), "\n")
	for _, tc := range []struct {
		name, content string
		code          reject.Code
		where         string
	}{
		{"a garbled middle line", lines[0] + "{\"kind\":\"exec\n" + lines[2], reject.Truncated, "line 2"},
		{"a non-canonical line", lines[0] + strings.Replace(lines[1], `{"attestation"`, `{ "attestation"`, 1) + lines[2], reject.NonCanonical, "line 2"},
		{"an unknown member", lines[0] + strings.Replace(lines[1], `"kind":"executed"}`, `"kind":"executed","x":1}`, 1) + lines[2], reject.UnknownField, "line 2"},
		{"an unknown kind", lines[0] + `{"kind":"paused"}` + "\n", reject.Invalid, "line 2"},
		{"no genesis entry", lines[1] + lines[2], reject.Missing, "line 1"},
		{"another domain", strings.Replace(lines[0], "runrecord/1", "runrecord/2", 1), reject.Unrecognised, "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.WriteFile(path, []byte(tc.content), 0o600)
			_, err := Open(path)
			if !errors.Is(err, tc.code) || !strings.Contains(err.Error(), tc.where) {
				t.Fatalf("got %v, want %s at %s", err, tc.code, tc.where)
			}
		})
	}
}

// One execution is one segment: a record that names the same run twice
// would count its energy twice. The wire form is refused at the second,
// on a replay and on open.
func TestTheSameExecutionTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	f, _ := Create(path, unit, grants)
	f.Append(executed("1"))
	f.Append(executed("2"))
	f.Close()
	good, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(good), "\n")
	twice := good
	twice = append(append([]byte{}, twice...), lines[1]...)
	if _, err := VerifyBytes(twice); !errors.Is(err, reject.Invalid) || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "segment 1") {
		t.Fatalf("replay: %v", err)
	}
	os.WriteFile(path, twice, 0o600)
	if _, err := Open(path); !errors.Is(err, reject.Invalid) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("open: %v", err)
	}
}
