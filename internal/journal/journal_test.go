package journal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/reject"
)

func TestWriteParseReplay(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Append("clock.wall", nil, int64(1700000000000000000))
	w.Append("random", 4, []byte{1, 2, 3, 4})
	w.Append("kv.get", []any{"cache", []byte("k")}, []any{true, []byte("v")})
	entries, root, err := Parse(buf.Bytes())
	if err != nil || len(entries) != 3 || root != w.Root() {
		t.Fatalf("Parse = %d entries, %v, root match %v", len(entries), err, root == w.Root())
	}
	if n, size := w.Len(); n != 3 || size != int64(buf.Len()) {
		t.Fatalf("Len = %d, %d", n, size)
	}
	// Same entries, same root; order matters.
	w2 := NewWriter(nil)
	w2.Append("clock.wall", nil, int64(1700000000000000000))
	w2.Append("random", 4, []byte{1, 2, 3, 4})
	w2.Append("kv.get", []any{"cache", []byte("k")}, []any{true, []byte("v")})
	if w2.Root() != root {
		t.Fatal("same entries, different root")
	}
	if NewWriter(nil).Root() != Genesis() {
		t.Fatal("empty journal root is not genesis")
	}

	r := NewReader(entries)
	var now int64
	if err := r.Next("clock.wall", nil, &now); err != nil || now != 1700000000000000000 {
		t.Fatalf("Next clock = %d, %v", now, err)
	}
	var rnd []byte
	if err := r.Next("random", 4, &rnd); err != nil || !bytes.Equal(rnd, []byte{1, 2, 3, 4}) {
		t.Fatalf("Next random = %v, %v", rnd, err)
	}
	var got []any
	err = r.Next("kv.get", []any{"cache", []byte("other")}, &got)
	var d *Divergence
	if !errors.As(err, &d) || d.Index != 2 {
		t.Fatalf("divergence = %v", err)
	}
	if r.Next("kv.get", []any{"cache", []byte("k")}, &got) == nil {
		t.Fatal("reader continued after a divergence")
	}
}

func TestReplayRootMatches(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Append("random", 2, []byte{9, 9})
	entries, root, _ := Parse(buf.Bytes())
	r := NewReader(entries)
	var b []byte
	r.Next("random", 2, &b)
	if r.Root() != root || r.Remaining() != 0 {
		t.Fatal("replay root differs")
	}
	var x int64
	if err := r.Next("clock.wall", nil, &x); err == nil {
		t.Fatal("read past the end")
	}
}

func TestParseRefuses(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Append("random", 2, []byte{9, 9})
	good := buf.Bytes()
	tests := []struct {
		name string
		b    []byte
		want reject.Code
	}{
		{"truncated", good[:len(good)-1], reject.Truncated},
		{"non-shortest", append([]byte{0xa3, 0x61, 0x6b, 0x78, 0x06}, good[4:]...), reject.NonShortest},
		{"not a map", []byte{0x01}, reject.Invalid},
		{"unknown field", []byte{0xa4, 0x61, 0x6b, 0x61, 'x', 0x61, 0x71, 0x00, 0x61, 0x72, 0x00, 0x61, 0x7a, 0x00}, reject.UnknownField},
	}
	for _, tc := range tests {
		if _, _, err := Parse(tc.b); reject.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	if _, root, err := Parse(nil); err != nil || root != Genesis() {
		t.Fatal("empty journal")
	}
}

func FuzzParse(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Append("random", 2, []byte{9, 9})
	w.Append("clock.wall", nil, int64(5))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, root, err := Parse(b)
		if err != nil {
			if reject.CodeOf(err) == "" {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		w := NewWriter(nil)
		for _, e := range entries {
			w.Append(e.Kind, e.Req, e.Resp)
		}
		if w.Root() != root {
			t.Fatal("re-appending parsed entries changes the root")
		}
	})
}

// failAfter is a writer that takes n bytes, then fails like a full disk.
type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		f.n = 0
		return 0, errors.New("no space left on device")
	}
	f.n -= len(p)
	return len(p), nil
}

// TestWriteFailureDoesNotStopTheJournal: a failed write is reported by
// Err, not by Append (the guest is not refused its input), and the root
// is still the one the whole journal has.
func TestWriteFailureDoesNotStopTheJournal(t *testing.T) {
	var whole bytes.Buffer
	ok, broken := NewWriter(&whole), NewWriter(&failAfter{n: 20})
	for i := range 5 {
		for _, w := range []*Writer{ok, broken} {
			if err := w.Append("random", i, []byte{byte(i), 1, 2, 3}); err != nil {
				t.Fatalf("Append %d: %v", i, err)
			}
		}
	}
	if ok.Err() != nil || broken.Err() == nil {
		t.Fatalf("Err: %v, %v", ok.Err(), broken.Err())
	}
	if ok.Root() != broken.Root() {
		t.Fatal("a failed write changed the root")
	}
}

// TestOutcomeForms: an outcome that cuts no stream is the seven-item
// array (the bytes runs have always written); one that cuts a stream is
// the nine-item array naming the kept prefix; a nine-item array that
// cuts nothing, or keeps a prefix as long as its stream, is refused.
func TestOutcomeForms(t *testing.T) {
	whole := Outcome{Status: "exited", ExitCode: 0, Stdout: addr.Of([]byte("hi\n")), StdoutLen: 3, Stderr: addr.Of(nil)}
	cut := whole
	cut.StdoutLen = 10
	cut.StdoutKept = &Kept{Len: 3, Addr: addr.Of([]byte("hi\n"))}
	for _, c := range []struct {
		name  string
		o     Outcome
		first byte
	}{{"whole", whole, 0x87}, {"cut", cut, 0x89}} {
		b, err := detcbor.Marshal(c.o)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != c.first {
			t.Fatalf("%s: the form is %#x, want %#x", c.name, b[0], c.first)
		}
		var got Outcome
		if err := detcbor.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if again, _ := detcbor.Marshal(got); !bytes.Equal(again, b) {
			t.Fatalf("%s: decodes to %+v, which re-encodes otherwise", c.name, got)
		}
	}
	nothingCut, _ := detcbor.Marshal(outcome9{Status: "exited", Stdout: whole.Stdout, StdoutLen: 3, Stderr: whole.Stderr})
	long := cut
	long.StdoutKept = &Kept{Len: 10, Addr: whole.Stdout}
	tooLong, _ := detcbor.Marshal(long)
	seven, _ := detcbor.Marshal(whole)
	eight := append([]byte{0x88}, append(seven[1:], 0xf6)...)
	for name, c := range map[string]struct {
		b    []byte
		code reject.Code
	}{
		"nine items, nothing cut": {nothingCut, reject.NonCanonical},
		"a prefix as long":        {tooLong, reject.Invalid},
		"eight items":             {eight, reject.Invalid},
	} {
		var o Outcome
		if err := detcbor.Unmarshal(c.b, &o); !errors.Is(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
}
