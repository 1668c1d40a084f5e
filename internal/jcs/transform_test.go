package jcs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	gojcs "github.com/gowebpki/jcs"
)

func TestTransformRefuses(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":1,"a":2}`, `[1,]`, `{"a" 1}`, `"abc`, `tru`, `{"a":1}x`, `[1 2]`, `{1:2}`, `nul`, `01`} {
		if got, err := transform([]byte(in)); err == nil {
			t.Errorf("transform(%q) = %q, want an error", in, got)
		}
	}
	deep := bytes.Repeat([]byte("["), MaxDepth+2)
	if _, err := transform(deep); err == nil {
		t.Error("transform accepted nesting deeper than MaxDepth")
	}
}

// FuzzTransform holds transform to the reference implementation: where
// either writes bytes in the profile, the other writes the same bytes.
func FuzzTransform(f *testing.F) {
	for _, s := range []string{`{}`, `{"b":1,"a":[1,"x",null,true,false]}`, ` { "a" : "\u00e9\n\u001f\"" } `, "{\"\U0001F602\":1,\"\uFB33\":2}",
		`[-0,0,-1,1.5,1e21,9007199254740993,123456789012345,-1234567890123456,1E2,0.000001,1e-7]`, `"\u2028<>&\/"`, `{"a":{"c":1,"b":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ours, oerr := transform(b)
		ref, rerr := gojcs.Transform(b)
		if oerr == nil && Check(ours) == nil && (rerr != nil || !bytes.Equal(ours, ref)) {
			t.Fatalf("transform(%q) = %q in the profile; the reference: %q, %v", b, ours, ref, rerr)
		}
		if rerr == nil && Check(ref) == nil && (oerr != nil || !bytes.Equal(ours, ref)) {
			t.Fatalf("the reference's %q is in the profile; transform(%q) = %q, %v", ref, b, ours, oerr)
		}
	})
}

// BenchmarkTransform: this package's transform against the reference's,
// on a record the size of an attestation's claim.
func BenchmarkTransform(b *testing.B) {
	type dev struct {
		Class, Model, UUID string
		Joules             int64
	}
	v := struct {
		Type, Unit, Grants, Executor string
		Notes                        []string
		Devices                      []dev
		Start, End                   int64
	}{"sandbox.attestation/4", "b3:" + strings.Repeat("ab", 32), "b3:" + strings.Repeat("cd", 32), "linux-s1",
		[]string{"one note", "two \"quoted\" notes\n"}, []dev{{"Gpu", "NVIDIA H200", "GPU-9f24a0f6", 7870263000}, {"Cpu", "EPYC", "", 66910204}}, 1796401687169908348, 1796401687198638224}
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ours", func(b *testing.B) {
		for range b.N {
			if _, err := transform(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		for range b.N {
			if _, err := gojcs.Transform(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
