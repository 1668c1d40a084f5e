package note

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// The spec's example: its verifier key verifies its note.
func TestSpecExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vectors", "signed-note-c2sp", "examples.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex []struct {
		VKey       string `json:"vkey"`
		NoteText   string `json:"note_text"`
		SignedNote string `json:"signed_note"`
		Expect     string `json:"expect"`
	}
	if err := json.Unmarshal(b, &ex); err != nil || len(ex) == 0 {
		t.Fatal(err)
	}
	for _, e := range ex {
		v, err := ParseVerifierKey(e.VKey)
		if err != nil {
			t.Fatal(err)
		}
		text, names, err := Open([]byte(e.SignedNote), []Verifier{v})
		if (err == nil) != (e.Expect == "valid") || text != e.NoteText || (err == nil && names[0] != v.Name) {
			t.Fatalf("%v %q %v", err, text, names)
		}
		// Changed by one byte, it fails.
		bad := strings.Replace(e.SignedNote, "example", "exbmple", 1)
		if _, _, err := Open([]byte(bad), []Verifier{v}); !errors.Is(err, reject.Signature) {
			t.Fatalf("a changed note: %v", err)
		}
	}
}

// A verifier key's base64 may hold '+', the separator: every one of many
// keys parses back to itself.
func TestVerifierKeysWithPlus(t *testing.T) {
	plus := 0
	for range 200 {
		k, _ := key.Generate(rand.Reader)
		vk, err := VerifierKey("h", k.Public())
		if err != nil {
			t.Fatal(err)
		}
		plus += strings.Count(vk, "+") - 2
		v, err := ParseVerifierKey(vk)
		if err != nil || string(v.Key) != string(pubBytes(k.Public())) {
			t.Fatalf("%s: %v", vk, err)
		}
	}
	if plus == 0 {
		t.Fatal("no key with a '+' in 200: the case is not tested")
	}
}

func TestSignOpenCheckpoint(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	other, _ := key.Generate(rand.Reader)
	var root [32]byte
	root[3] = 7
	cp, err := Checkpoint("sandbox.example/fleet/f-1", 100000, root)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Sign(cp, "sandbox.example/host", k)
	if err != nil {
		t.Fatal(err)
	}
	vk, _ := VerifierKey("sandbox.example/host", k.Public())
	v, err := ParseVerifierKey(vk)
	if err != nil {
		t.Fatal(err)
	}
	ovk, _ := VerifierKey("sandbox.example/other", other.Public())
	ov, _ := ParseVerifierKey(ovk)
	text, names, err := Open([]byte(n), []Verifier{ov, v})
	if err != nil || text != cp || len(names) != 1 {
		t.Fatalf("%v %v", err, names)
	}
	origin, size, r, ext, err := ParseCheckpoint(text)
	if err != nil || origin != "sandbox.example/fleet/f-1" || size != 100000 || r != root || len(ext) != 0 {
		t.Fatalf("%s %d %x %v", origin, size, r, err)
	}
	if _, _, err := Open([]byte(n), []Verifier{ov}); !errors.Is(err, reject.UntrustedKey) {
		t.Fatalf("no known key: %v", err)
	}
	for _, bad := range []string{"", "no blank line\n— a b\n", cp + "\n", cp + "\n— x", cp + "\n— sandbox.example/host !!!\n", "\n\n— a AAAAAAA=\n"} {
		if _, _, err := Open([]byte(bad), []Verifier{v}); err == nil {
			t.Errorf("opened %q", bad)
		}
	}
	if _, err := Sign("no newline", "n", k); err == nil {
		t.Fatal("signed a text without its newline")
	}
	if _, err := ParseVerifierKey(strings.Replace(vk, "+", "+0", 1)); err == nil {
		t.Fatal("a verifier key whose ID is not its key's")
	}
}

// A signed note is a stranger's bytes: Open never panics.
func FuzzOpen(f *testing.F) {
	k, _ := key.Generate(strings.NewReader(strings.Repeat("k", 64)))
	cp, _ := Checkpoint("o", 1, [32]byte{})
	n, _ := Sign(cp, "h", k)
	vk, _ := VerifierKey("h", k.Public())
	v, _ := ParseVerifierKey(vk)
	f.Add([]byte(n))
	f.Fuzz(func(t *testing.T, b []byte) {
		text, _, err := Open(b, []Verifier{v})
		if err == nil {
			ParseCheckpoint(text)
		}
	})
}

func pubBytes(p key.Public) []byte { return p[:] }
