package jcs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gojcs "github.com/gowebpki/jcs"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/reject"
)

var vectorDir = filepath.Join("..", "..", "testdata", "vectors", "jcs-cyberphone")

// TestJCSVectors runs the RFC 8785 reference vectors: the library and
// this package's transform turn each input into the published output
// (but values.json, whose floats the profile refuses: there Check refuses
// what transform writes), Check accepts every output that stays in the
// profile, and Check refuses every input, which is not canonical.
func TestJCSVectors(t *testing.T) {
	names, err := filepath.Glob(filepath.Join(vectorDir, "input", "*.json"))
	if err != nil || len(names) != 6 {
		t.Fatalf("found %d input vectors (%v), want 6", len(names), err)
	}
	for _, in := range names {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			input, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(vectorDir, "output", name))
			if err != nil {
				t.Fatal(err)
			}
			got, err := gojcs.Transform(input)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Transform = %q, %v; want %q", got, err, want)
			}
			ours, err := transform(input)
			if name == "values.json" {
				if err != nil || Check(ours) == nil {
					t.Errorf("transform = %q, %v: want floats, which Check refuses", ours, err)
				}
			} else if err != nil || !bytes.Equal(ours, want) {
				t.Errorf("transform = %q, %v; want %q", ours, err, want)
			}
			err = Check(want)
			if name == "values.json" {
				if !errors.Is(err, reject.Float) {
					t.Fatalf("Check(values output) = %v, want %s", err, reject.Float)
				}
			} else if err != nil {
				t.Fatalf("Check(output) = %v", err)
			}
			if err := Check(input); err == nil {
				t.Fatal("Check accepted a non-canonical input")
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		in   string
		want reject.Code // "" means accepted
	}{
		{`{}`, ""},
		{`[]`, ""},
		{`{"a":1,"b":[true,false,null],"c":"x"}`, ""},
		{`-9007199254740991`, ""},
		{`9007199254740991`, ""},
		{`"\u001f\n\"\\"`, ""},
		{`"é€😂"`, ""},
		{`{"b":1,"a":2}`, reject.NonCanonical},
		{`{"a":1,"a":2}`, reject.DuplicateKey},
		{`{"a": 1}`, reject.NonCanonical},
		{` {}`, reject.NonCanonical},
		{`{} `, reject.NonCanonical},
		{`[1 ,2]`, reject.NonCanonical},
		{`1.5`, reject.Float},
		{`1e3`, reject.Float},
		{`{"n":2.0}`, reject.Float},
		{`9007199254740992`, reject.IntRange},
		{`-9007199254740992`, reject.IntRange},
		{`123456789012345678901234567890`, reject.IntRange},
		{`01`, reject.Malformed},
		{`-0`, reject.NonCanonical},
		{`"\/"`, reject.NonCanonical},
		{`"\u0041"`, reject.NonCanonical},
		{`"\u000A"`, reject.NonCanonical},
		{`"\u000a"`, reject.NonCanonical},
		{`"\u001F"`, reject.NonCanonical},
		{"\"\x01\"", reject.NonCanonical},
		{"\"\xff\"", reject.Malformed},
		{`{"a":1`, reject.Truncated},
		{`"abc`, reject.Truncated},
		{`[1,`, reject.Truncated},
		{`tru`, reject.Truncated},
		{``, reject.Truncated},
		{`{1:2}`, reject.Malformed},
		{`nul!`, reject.Malformed},
		{`"\q"`, reject.Malformed},
		{`-`, reject.Truncated},
		{`-a`, reject.Malformed},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), reject.Malformed},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ""},
		// UTF-16 order: U+1F602 (surrogates D83D DE02) sorts before U+FB33.
		{"{\"\U0001F602\":1,\"\uFB33\":2}", ""},
		{"{\"\uFB33\":2,\"\U0001F602\":1}", reject.NonCanonical},
	}
	for _, tc := range tests {
		err := Check([]byte(tc.in))
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%q) = %v, want nil", tc.in, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("Check(%q) = %v, want %s", tc.in, err, tc.want)
		}
	}
}

func TestCheckNamesOffset(t *testing.T) {
	err := Check([]byte(`{"a":1,"c":2,"b":3}`))
	var e *reject.Error
	if !errors.As(err, &e) || e.Where != "offset 13" || !strings.Contains(e.Detail, `"b"`) {
		t.Fatalf("got %#v", err)
	}
}

type rec struct {
	Name string    `json:"name"`
	N    int64     `json:"n"`
	A    addr.Addr `json:"a"`
	Tags []string  `json:"tags,omitempty"`
}

func TestMarshalUnmarshal(t *testing.T) {
	r := rec{Name: "<x>&", N: 42, A: addr.Of([]byte("a"))}
	b, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":"` + r.A.String() + `","n":42,"name":"<x>&"}`
	if string(b) != want {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var back rec
	if err := Unmarshal(b, &back); err != nil || back.Name != r.Name || back.A != r.A {
		t.Fatalf("Unmarshal = %+v, %v", back, err)
	}
	if _, err := Marshal(struct{ F float64 }{1.5}); err == nil {
		t.Fatal("Marshal accepted a float")
	}
	if _, err := Marshal(struct{ N uint64 }{1 << 60}); !errors.Is(err, reject.IntRange) {
		t.Fatalf("Marshal(2^60) = %v", err)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	var r rec
	a := addr.Of(nil).String()
	tests := []struct {
		in   string
		want reject.Code
	}{
		{`{"extra":1,"n":1}`, reject.UnknownField},
		{`{"a":"` + a + `","n":"x","name":"y"}`, reject.Invalid},
		{`{"a":"b3:00","n":1,"name":"y"}`, reject.Invalid},
		{`{"a":"` + a + `","n":1,"name":"x"} `, reject.NonCanonical},
		{`{"a":"` + a + `","n":1,"namE":"x"}`, reject.UnknownField},
		{`{"a":"` + a + `","n":1}`, reject.MissingField},
		{`{"a":"` + a + `","n":1,"name":"x","tags":[]}`, reject.NonCanonical},
		{`{"a":"` + a + `","n":null,"name":"x"}`, reject.Invalid},
		{`{"a":"` + a + `","n":1,"name":"x","tags":["a"]}`, ""},
	}
	for _, tc := range tests {
		err := Unmarshal([]byte(tc.in), &r)
		if tc.want == "" {
			if err != nil {
				t.Errorf("Unmarshal(%s) = %v", tc.in, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("Unmarshal(%s) = %v, want %s", tc.in, err, tc.want)
		}
	}
}

// FuzzCheck: whatever Check accepts is its own JCS form according to the
// reference implementation, and Check never panics.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,"x",null]}`, `{"b":1,"a":2}`, `"\u0000"`, `1.5`, "{\"\U0001F602\":1,\"\uFB33\":2}"} {
		f.Add([]byte(s))
	}
	if names, _ := filepath.Glob(filepath.Join(vectorDir, "*", "*.json")); names != nil {
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) != nil {
			return
		}
		got, err := gojcs.Transform(b)
		if err != nil {
			t.Fatalf("Check accepted %q, which the reference refuses: %v", b, err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("Check accepted %q, whose JCS form is %q", b, got)
		}
	})
}

// FuzzDecode: whatever Decode accepts for a record type marshals back to
// the same bytes: one spelling per record.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"a":"` + addr.Of(nil).String() + `","n":1,"name":"x","tags":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rec
		if Unmarshal(b, &r) != nil {
			return
		}
		again, err := Marshal(r)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("accepted %s, which marshals as %s (%v)", b, again, err)
		}
	})
}

func TestOneValue(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":1}`: true, `{"a":1},"b":2`: false, `{"a":"x`: false, `[1,2]`: true, ``: false, `"s"`: true,
	} {
		if OneValue([]byte(in)) != want {
			t.Errorf("OneValue(%q) != %v", in, want)
		}
	}
}

// TestOmitZero: an omitzero member is optional, left out when zero, and
// refused when written out with its zero value (two encodings of one
// value would be two addresses).
func TestOmitZero(t *testing.T) {
	type z struct {
		N    int64     `json:"n"`
		Root addr.Addr `json:"root,omitzero"`
	}
	b, err := Marshal(z{N: 1})
	if err != nil || string(b) != `{"n":1}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back z
	if err := Unmarshal(b, &back); err != nil || !back.Root.IsZero() {
		t.Fatalf("absent: %+v %v", back, err)
	}
	a := addr.Of([]byte("r"))
	set := `{"n":1,"root":"` + a.String() + `"}`
	if err := Unmarshal([]byte(set), &back); err != nil || back.Root != a {
		t.Fatalf("set: %+v %v", back, err)
	}
	zero := `{"n":1,"root":"` + addr.Addr{}.String() + `"}`
	if err := Unmarshal([]byte(zero), &back); !errors.Is(err, reject.NonCanonical) {
		t.Fatalf("zero written out: %v", err)
	}
}
