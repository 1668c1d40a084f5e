package detcbor

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/opensubstrate/sandbox/reject"
)

var vectorDir = filepath.Join("..", "..", "testdata", "vectors", "cbor")

func load(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRFC8949KeyOrder: the RFC's key set, encoded by Marshal in any
// insertion order, gives the RFC's bytes, and Check accepts them.
func TestRFC8949KeyOrder(t *testing.T) {
	var doc struct {
		KeyOrder []struct{ Hex string } `json:"key_order"`
		Map      struct{ Hex string }   `json:"map_of_keys_to_empty_arrays"`
		Floats   []struct {
			Value float64
			Hex   string
		}
	}
	load(t, "rfc8949-core-deterministic.json", &doc)
	want := unhex(t, doc.Map.Hex)
	if err := Check(want); err != nil {
		t.Fatalf("Check(RFC map) = %v", err)
	}
	// Build the map from the keys in reverse order, as raw CBOR keys.
	m := map[any]any{}
	for i := len(doc.KeyOrder) - 1; i >= 0; i-- {
		var k any
		if err := cbor.Unmarshal(unhex(t, doc.KeyOrder[i].Hex), &k); err != nil {
			t.Fatal(err)
		}
		if s, ok := k.([]any); ok { // slices are not hashable: use a fixed-size array
			k = [1]any{s[0]}
		}
		m[k] = []any{}
	}
	got, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Marshal = %x, want %x", got, want)
	}
	// Any two adjacent keys swapped is refused as unsorted.
	swapped := append([]byte{0xa2}, unhex(t, "617a80"+"0a80")...)
	if err := Check(swapped); !errors.Is(err, reject.UnsortedKeys) {
		t.Fatalf("Check(swapped) = %v", err)
	}
	for _, f := range doc.Floats {
		got, err := Marshal(f.Value)
		if err != nil || hex.EncodeToString(got) != f.Hex {
			t.Errorf("Marshal(%v) = %x, %v; want %s", f.Value, got, err, f.Hex)
		}
		if err := Check(got); err != nil {
			t.Errorf("Check(%x) = %v", got, err)
		}
	}
}

// TestAppendixA: every RFC 7049/8949 Appendix A item marked round-trip is
// accepted; every other one (indefinite lengths, floats in longer forms than
// needed) is refused with the matching code.
func TestAppendixA(t *testing.T) {
	var items []struct {
		Hex        string
		Roundtrip  bool
		Diagnostic string
	}
	load(t, "rfc7049-appendix_a.json", &items)
	if len(items) != 82 {
		t.Fatalf("%d items, want 82", len(items))
	}
	for _, it := range items {
		err := Check(unhex(t, it.Hex))
		if it.Hex == "f818" {
			// simple(24) in two bytes: RFC 7049 listed it; RFC 8949 section
			// 3.3 makes it not well-formed.
			if !errors.Is(err, reject.Malformed) {
				t.Errorf("f818: Check = %v, want %s", err, reject.Malformed)
			}
			continue
		}
		if it.Roundtrip {
			if err != nil {
				t.Errorf("%s: Check = %v", it.Hex, err)
			}
			continue
		}
		want := reject.NonShortest
		if strings.HasPrefix(it.Hex, "5f") || strings.HasPrefix(it.Hex, "7f") || strings.HasPrefix(it.Hex, "9f") ||
			strings.HasPrefix(it.Hex, "bf") || strings.Contains(it.Hex[2:], "9f") || strings.Contains(it.Hex[2:], "bf") {
			want = reject.Indefinite
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: Check = %v, want %s", it.Hex, err, want)
		}
	}
}

// TestDCBORVectors: the dCBOR vectors that are about core determinism
// (shortest heads and floats, duplicates, order, indefinite lengths) get
// their code; the rest are dCBOR-only rules that CDE does not impose.
func TestDCBORVectors(t *testing.T) {
	var valid, invalid []struct {
		Hex        string
		Diagnostic string
	}
	load(t, "dcbor-valid.json", &valid)
	load(t, "dcbor-invalid.json", &invalid)
	for _, it := range valid {
		if err := Check(unhex(t, it.Hex)); err != nil {
			t.Errorf("valid %s (%s): %v", it.Hex, it.Diagnostic, err)
		}
	}
	want := map[string]reject.Code{
		"fa41400000": reject.NonShortest, "fb4028000000000000": reject.NonShortest,
		"180c": reject.NonShortest, "19000c": reject.NonShortest, "1a0000000c": reject.NonShortest, "1b000000000000000c": reject.NonShortest,
		"fa3fc00000": reject.NonShortest, "fb3ff8000000000000": reject.NonShortest,
		"fb7ff0000000000000": reject.NonShortest, "fa7f800000": reject.NonShortest,
		"fbfff0000000000000": reject.NonShortest, "faff800000": reject.NonShortest,
		"fb7ff9100000000001": reject.NonShortest, "faffc00001": reject.NonShortest, "f97e01": reject.NonShortest,
		"a2616101616102": reject.DuplicateKey, "a200010002": reject.DuplicateKey, "a229002901": reject.DuplicateKey,
		"a2f5f4f5f6": reject.DuplicateKey, "a280008001": reject.DuplicateKey, "a2810000810001": reject.DuplicateKey,
		"a2616200616101": reject.UnsortedKeys,
		"fa80000000":     reject.NonShortest, "fb8000000000000000": reject.NonShortest,
		"5fff": reject.Indefinite, "7fff": reject.Indefinite, "9fff": reject.Indefinite, "bfff": reject.Indefinite,
	}
	seen := 0
	for _, it := range invalid {
		code, ok := want[it.Hex]
		err := Check(unhex(t, it.Hex))
		if !ok {
			// dCBOR-only: numeric reduction, -0.0, bignum form, simple values, NFC.
			if err != nil {
				t.Errorf("%s (%s): CDE accepts it, Check = %v", it.Hex, it.Diagnostic, err)
			}
			continue
		}
		seen++
		if !errors.Is(err, code) {
			t.Errorf("%s (%s): Check = %v, want %s", it.Hex, it.Diagnostic, err, code)
		}
	}
	if seen != len(want) {
		t.Fatalf("matched %d of %d expected invalid vectors", seen, len(want))
	}
}

func TestCheckMore(t *testing.T) {
	tests := []struct {
		hex  string
		want reject.Code
	}{
		{"", reject.Truncated},
		{"18", reject.Truncated},
		{"6261", reject.Truncated},
		{"83010203", ""},
		{"830102", reject.Truncated},
		{"a1", reject.Truncated},
		{"0000", reject.Malformed},   // trailing
		{"1c", reject.Malformed},     // reserved ai 28
		{"ff", reject.Malformed},     // break outside
		{"1f", reject.Malformed},     // ai 31 on major 0
		{"f818", reject.Malformed},   // simple value < 32 in two bytes
		{"6261ff", reject.Malformed}, // invalid UTF-8
		{"5818" + strings.Repeat("00", 24), ""},
		{"5817" + strings.Repeat("00", 23), reject.NonShortest},
		{"d80000", reject.NonShortest}, // tag 0 in a 1-byte argument
		{"d81800", ""},                 // tag 24 needs the 1-byte argument
		{"c000", ""},
		{"9b0000000100000000", reject.Truncated}, // huge array count, no items
		{strings.Repeat("81", MaxDepth+1) + "00", reject.Malformed},
		{"f90400", ""},     // smallest normal half
		{"f90001", ""},     // smallest subnormal half
		{"fa33800000", ""}, // 2^-24 as single: fits half (subnormal)... see below
	}
	// 2^-24 is the smallest half subnormal, so its single form is not shortest.
	tests[len(tests)-1].want = reject.NonShortest
	for _, tc := range tests {
		err := Check(unhex(t, tc.hex))
		if tc.want == "" {
			if err != nil {
				t.Errorf("Check(%s) = %v", tc.hex, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("Check(%s) = %v, want %s", tc.hex, err, tc.want)
		}
	}
}

// TestFitsHalf compares fitsHalf with a brute-force walk of all half values.
func TestFitsHalf(t *testing.T) {
	halves := map[float64]bool{}
	for h := 0; h < 1<<16; h++ {
		if f := half(uint16(h)); !math.IsNaN(f) {
			halves[f] = true
		}
	}
	for f := range halves {
		if !fitsHalf(f) {
			t.Fatalf("fitsHalf(%v) = false", f)
		}
		if g := math.Nextafter(f, math.Inf(1)); !halves[g] && fitsHalf(g) {
			t.Fatalf("fitsHalf(%v) = true", g)
		}
	}
	for _, f := range []float64{1e-8, 65505, 65520, 3.0000001, 1.0 / 3} {
		if fitsHalf(f) {
			t.Errorf("fitsHalf(%v) = true", f)
		}
	}
}

func half(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h >> 10 & 0x1f)
	mant := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(mant, -24)
	case 31:
		if mant == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(1024+mant, exp-25)
}

type rec struct {
	A uint64 `cbor:"a"`
	B string `cbor:"b,omitempty"`
}

func TestUnmarshal(t *testing.T) {
	b, err := Marshal(rec{A: 7, B: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var r rec
	if err := Unmarshal(b, &r); err != nil || r.A != 7 || r.B != "x" {
		t.Fatalf("Unmarshal = %+v, %v", r, err)
	}
	tests := []struct {
		name string
		in   any
		want reject.Code
	}{
		{"unknown field", map[string]any{"a": 1, "z": 2}, reject.UnknownField},
		{"empty optional written out", map[string]any{"a": 1, "b": ""}, reject.NonCanonical},
		{"wrong type", map[string]any{"a": "x"}, reject.Invalid},
	}
	for _, tc := range tests {
		raw, err := Marshal(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := Unmarshal(raw, &rec{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: Unmarshal = %v, want %s", tc.name, err, tc.want)
		}
	}
}

// FuzzCheck: whatever Check accepts, fxamacker/cbor decodes, and its
// core-deterministic re-encoding of the generic value is the same bytes
// (items that decode lossily into Go's any are skipped: tags, undefined).
func FuzzCheck(f *testing.F) {
	var items []struct{ Hex string }
	load(f, "rfc7049-appendix_a.json", &items)
	for _, it := range items {
		f.Add(unhex(f, it.Hex))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if Check(b) != nil {
			return
		}
		var v any
		if err := decMode.Unmarshal(b, &v); err != nil {
			if bytes.IndexByte(b, 0xf7) >= 0 || hasTag(b) || strings.Contains(err.Error(), "invalid map key type") {
				return // undefined, tags, and map or array keys: Go's any cannot hold them
			}
			t.Fatalf("Check accepted %x, which the decoder refuses: %v", b, err)
		}
		again, err := encMode.Marshal(v)
		if err != nil || !bytes.Equal(again, b) {
			if hasTag(b) || bytes.IndexByte(b, 0xf7) >= 0 || bytes.IndexByte(b, 0xf9) >= 0 || bytes.IndexByte(b, 0xfa) >= 0 {
				return // tags, undefined and floats do not survive a trip through any
			}
			t.Fatalf("Check accepted %x, which re-encodes to %x (%v)", b, again, err)
		}
	})
}

func hasTag(b []byte) bool {
	for _, c := range b {
		if c>>5 == 6 {
			return true
		}
	}
	return false
}
