package addr

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOfficialVectors runs the BLAKE3 team's vectors (testdata/vectors/blake3)
// through Of: the first 32 bytes of each extended "hash" output are the digest.
func TestOfficialVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "blake3", "test_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			InputLen int    `json:"input_len"`
			Hash     string `json:"hash"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) != 35 {
		t.Fatalf("got %d cases, want 35", len(doc.Cases))
	}
	for _, c := range doc.Cases {
		in := make([]byte, c.InputLen)
		for i := range in {
			in[i] = byte(i % 251)
		}
		want := c.Hash[:64]
		if got := Of(in).Hex(); got != want {
			t.Errorf("len %d: Of = %s, want %s", c.InputLen, got, want)
		}
		got, err := OfReader(strings.NewReader(string(in)))
		if err != nil || got.Hex() != want {
			t.Errorf("len %d: OfReader = %s, %v; want %s", c.InputLen, got.Hex(), err, want)
		}
	}
}

func TestParse(t *testing.T) {
	good := "b3:" + strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"good", good, true},
		{"upper case", strings.ToUpper(good[:3]) + good[3:], false},
		{"upper hex", good[:3] + strings.ToUpper(good[3:]), false},
		{"no prefix", good[3:], false},
		{"other prefix", "sha256:" + good[3:], false},
		{"short", good[:len(good)-1], false},
		{"long", good + "0", false},
		{"non hex", good[:len(good)-1] + "g", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Parse(tc.in)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if a.String() != tc.in {
					t.Fatalf("round trip %q -> %q", tc.in, a)
				}
				return
			}
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("Parse(%q) = %v, want ErrSyntax", tc.in, err)
			}
		})
	}
}

func TestTextAndJSON(t *testing.T) {
	a := Of([]byte("abc"))
	b, err := json.Marshal(struct{ A Addr }{a})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"A":"` + a.String() + `"}`
	if string(b) != want {
		t.Fatalf("json = %s, want %s", b, want)
	}
	var back struct{ A Addr }
	if err := json.Unmarshal(b, &back); err != nil || back.A != a {
		t.Fatalf("unmarshal: %v %v", back.A, err)
	}
	if err := json.Unmarshal([]byte(`{"A":"b3:00"}`), &back); !errors.Is(err, ErrSyntax) {
		t.Fatalf("bad text accepted: %v", err)
	}
	if hex.EncodeToString(a[:]) != a.Hex() || len(a.Short()) != 12 {
		t.Fatal("Hex/Short")
	}
	if !(Addr{}).IsZero() || a.IsZero() {
		t.Fatal("IsZero")
	}
}

func TestOfFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := OfFile(p)
	if err != nil || a != Of([]byte("hello")) {
		t.Fatalf("OfFile = %v, %v", a, err)
	}
	if _, err := OfFile(p + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("b3:" + strings.Repeat("ab", 32))
	f.Add("b3:")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err == nil && a.String() != s {
			t.Fatalf("accepted %q but prints %q", s, a)
		}
	})
}

func BenchmarkOf1KiB(b *testing.B) {
	buf := make([]byte, 1024)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		Of(buf)
	}
}

func TestHasher(t *testing.T) {
	h := NewHasher()
	h.Write([]byte("ab"))
	h.Write([]byte("c"))
	if h.Sum() != Of([]byte("abc")) {
		t.Fatal("incremental hash differs")
	}
}
