package record

import (
	"bytes"
	"crypto/rand"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/syscalltest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

func sealedRecord(t *testing.T, k key.Private) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sb-000000000001.jsonl")
	f, err := CreateSealed(path, addr.Of([]byte("unit")), addr.Of([]byte("grants")), &Sealer{Key: k, ID: "sb-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	snap := Snapshot{Root: addr.Of([]byte("root")), Manifest: addr.Of([]byte("env"))}
	for _, s := range []Segment{{Kind: Executed, Attestation: addr.Of([]byte("run1"))}, {Kind: Suspended, Snapshot: snap}} {
		if _, err := f.Append(s); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	entries, _, err := chain.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, entries
}

func trusting(ks ...key.Public) func(key.Public) bool {
	tr := key.NewTrust(ks...)
	return tr.Trusts
}

func TestSeals(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	other, _ := key.Generate(rand.Reader)
	path, entries := sealedRecord(t, k)
	seals, err := ReadSeals(path)
	if err != nil || len(seals) != 3 {
		t.Fatalf("seals: %d %v", len(seals), err)
	}
	signers, err := CheckSeals("sb-000000000001", entries, seals, trusting(k.Public()))
	if err != nil || len(signers) != 3 || signers[0] != k.Public() {
		t.Fatalf("CheckSeals: %v %v", signers, err)
	}
	code := func(err error) reject.Code { return reject.CodeOf(err) }
	for _, tc := range []struct {
		name  string
		id    string
		e, s  [][]byte
		trust func(key.Public) bool
		want  reject.Code
	}{
		{"untrusted", "sb-000000000001", entries, seals, trusting(other.Public()), reject.UntrustedKey},
		{"another record", "sb-000000000002", entries, seals, trusting(k.Public()), reject.Splice},
		{"an entry unsealed", "sb-000000000001", entries, seals[:2], trusting(k.Public()), reject.Missing},
		{"a seal past the record", "sb-000000000001", entries[:2], seals, trusting(k.Public()), reject.Extended},
		{"seals out of order", "sb-000000000001", entries, [][]byte{seals[0], seals[2], seals[1]}, trusting(k.Public()), reject.Invalid},
	} {
		if _, err := CheckSeals(tc.id, tc.e, tc.s, tc.trust); code(err) != tc.want {
			t.Errorf("%s: %v; want %s", tc.name, err, tc.want)
		}
	}
	// A rewritten genesis (other grants): its head moved, so every seal
	// is of another head, and no seal of the new one can be made without
	// the key.
	forged := append([][]byte{bytes.Replace(entries[0], []byte(addr.Of([]byte("grants")).String()), []byte(addr.Of([]byte("fs:/etc:rw")).String()), 1)}, entries[1:]...)
	if _, err := CheckSeals("sb-000000000001", forged, seals, trusting(k.Public())); code(err) != reject.HeadMismatch {
		t.Errorf("a rewritten genesis: %v", err)
	}
	// The forger's own seals: its key is not trusted.
	var own [][]byte
	heads, _, _ := Heads(forged)
	for i, h := range heads {
		b, _ := NewSeal(other, "sb-000000000001", i+1, h).Bytes()
		own = append(own, b)
	}
	if _, err := CheckSeals("sb-000000000001", forged, own, trusting(k.Public())); code(err) != reject.UntrustedKey {
		t.Errorf("a forger's seals: %v", err)
	}
	// A signature that does not verify.
	bad := bytes.Replace(seals[1], []byte(`"sig":"`), []byte(`"sig":"00`), 1)
	bad = append(bad[:bytes.LastIndex(bad, []byte(`"}`))-2], `"}`...)
	if _, err := CheckSeals("sb-000000000001", entries, [][]byte{seals[0], bad, seals[2]}, trusting(k.Public())); code(err) != reject.Signature {
		t.Errorf("a bad signature: %v", err)
	}
}

// A host that ended between an entry and its seal seals it when it
// opens the record again; seals of entries the record never took are cut.
func TestSealsMadeWholeOnOpen(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	path, entries := sealedRecord(t, k)
	seals, _ := ReadSeals(path)
	os.WriteFile(SealPath(path), append(append([]byte{}, seals[0]...), '\n'), 0o600)
	f, err := OpenSealed(path, &Sealer{Key: k, ID: "sb-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, _ := ReadSeals(path)
	if _, err := CheckSeals("sb-000000000001", entries, got, trusting(k.Public())); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	// Two entries cut from the record (an import cut short before its
	// record): their seals go.
	var b []byte
	for _, e := range entries[:1] {
		b = append(append(b, e...), '\n')
	}
	os.WriteFile(path, b, 0o600)
	f, err = OpenSealed(path, &Sealer{Key: k, ID: "sb-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, _ := ReadSeals(path); len(got) != 1 {
		t.Fatalf("%d seals for one entry", len(got))
	}
	// A seal of this record and entry that signs another head says the
	// record is not what its host sealed: refused, never overwritten.
	other, _ := NewSeal(k, "sb-000000000001", 1, addr.Of([]byte("another head"))).Bytes()
	os.WriteFile(SealPath(path), append(other, '\n'), 0o600)
	if _, err := OpenSealed(path, &Sealer{Key: k, ID: "sb-000000000001"}); !errors.Is(err, reject.HeadMismatch) || !strings.Contains(err.Error(), "seal 1") {
		t.Fatalf("a seal of another head: %v", err)
	}
	if b, _ := os.ReadFile(SealPath(path)); !bytes.Equal(b, append(other, '\n')) {
		t.Fatal("the refused seal was overwritten")
	}
}

// Seals are written without an fsync, so a crash can leave the seals
// file short, or holding from some line on bytes that were never written
// there (a filesystem that does not order data before metadata: zeros,
// another file's old block, a later block kept where an earlier one was
// lost). The seals are cut from the first that is unreadable or of
// another record or entry, and those entries sealed again when the
// record is next opened, whatever follows.
func TestSealsTornByACrash(t *testing.T) {
	k, _ := key.Generate(rand.Reader)
	path0, entries := sealedRecord(t, k)
	own, _ := ReadSeals(path0) // the same bytes in every record sealedRecord makes
	another, _ := NewSeal(k, "sb-000000000002", 2, addr.Of([]byte("x"))).Bytes()
	for _, c := range []struct{ name, tail string }{
		{"nothing", ""},
		{"zeros", strings.Repeat("\x00", 300)},
		{"zeros and newlines", "\x00\x00\n\n\x00\n"},
		{"half a seal", string(own[1][:60]) + "\n"},
		{"another file's text", "PATH=/usr/bin\nHOME=/root\n"},
		{"an earlier block lost, a later kept", strings.Repeat("\x00", 40) + string(own[1][40:]) + "\n" + string(own[2]) + "\n"},
		{"another record's seal", string(another) + "\n"},
		{"another entry's seal", string(own[2]) + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path, _ := sealedRecord(t, k)
			os.WriteFile(SealPath(path), append(append([]byte{}, own[0]...), '\n'), 0o600)
			fh, _ := os.OpenFile(SealPath(path), os.O_APPEND|os.O_WRONLY, 0)
			fh.WriteString(c.tail)
			fh.Close()
			f, err := OpenSealed(path, &Sealer{Key: k, ID: "sb-000000000001"})
			if err != nil {
				t.Fatal(err)
			}
			if r := f.Repaired(); (c.tail != "") != strings.Contains(r, "cut from the seals after seal 1") {
				t.Errorf("what opening says it repaired: %q", r)
			}
			f.Close()
			got, _ := ReadSeals(path)
			if _, err := CheckSeals("sb-000000000001", entries, got, trusting(k.Public())); err != nil {
				t.Fatalf("after reopening: %v", err)
			}
			if b, _ := os.ReadFile(SealPath(path)); bytes.Count(b, []byte("\n")) != len(entries) || b[len(b)-1] != '\n' {
				t.Fatalf("the seals file after reopening:\n%q", b)
			}
		})
	}
}

// An entry appended to a sealed record costs one fsync: the record's.
// Its seal is written, not synced (TestSealsTornByACrash).
func TestAppendSyncsOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("counting system calls with perf needs root")
	}
	k, _ := key.Generate(rand.Reader)
	path := filepath.Join(t.TempDir(), "sb-000000000001.jsonl")
	f, err := CreateSealed(path, addr.Of([]byte("unit")), addr.Of([]byte("grants")), &Sealer{Key: k, ID: "sb-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := syscalltest.Count(syscalltest.Syncs, func() {
		if _, err := f.Append(Segment{Kind: Executed, Attestation: addr.Of([]byte("run1"))}); err != nil {
			t.Fatal(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, map[string]int{"fsync": 1}) {
		t.Fatalf("an append made %v, want one fsync", got)
	}
	entries, _, _ := chain.Read(path)
	seals, _ := ReadSeals(path)
	if _, err := CheckSeals("sb-000000000001", entries, seals, trusting(k.Public())); err != nil {
		t.Fatalf("the appended entry is not sealed: %v", err)
	}
}

func FuzzParseSeal(f *testing.F) {
	k, _ := key.FromSeed(make([]byte, 32))
	b, _ := NewSeal(k, "sb-000000000001", 1, addr.Of([]byte("x"))).Bytes()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSeal(b)
		if err != nil {
			var re *reject.Error
			if !errors.As(err, &re) {
				t.Fatalf("not a reject error: %v", err)
			}
			return
		}
		if !s.Key.Verify(SealMessage(s.Record, s.Entry, s.Head), mustHex(s.Sig)) {
			t.Fatal("a seal read whose signature does not verify")
		}
	})
}

func mustHex(s string) []byte {
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, c := range s[2*i : 2*i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= byte(c - '0')
			case c >= 'a' && c <= 'f':
				v |= byte(c-'a') + 10
			}
		}
		b[i] = v
	}
	return b
}
