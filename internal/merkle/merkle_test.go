package merkle

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var shared = filepath.Join("..", "..", "testdata", "vectors")

func b64(t *testing.T, s string) Hash {
	t.Helper()
	b, _ := base64.StdEncoding.DecodeString(s)
	var h Hash
	copy(h[:], b)
	return h
}

// badLength reports whether a vector gives a hash that is not 32 bytes:
// a Hash cannot hold one, so such a proof is refused before it is
// checked.
func badLength(ss ...string) bool {
	for _, s := range ss {
		if b, err := base64.StdEncoding.DecodeString(s); err != nil || len(b) != 32 {
			return true
		}
	}
	return false
}

func hashes(t *testing.T, ss []string) []Hash {
	out := make([]Hash, len(ss))
	for i, s := range ss {
		out[i] = b64(t, s)
	}
	return out
}

// The reference tree (transparency-dev testonly/constants.go): every root
// by size, and every proof this package makes from it verifies.
func TestReferenceTree(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(shared, "merkle-transparency-dev", "rfc6962-reference-tree.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Leaves []string `json:"leaf_inputs_hex"`
		Roots  []string `json:"root_hashes_by_size_hex"`
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	var leaves []Hash
	for _, l := range ref.Leaves {
		d, _ := hex.DecodeString(l)
		leaves = append(leaves, LeafHash(d))
	}
	for n, want := range ref.Roots {
		got := Root(leaves[:n])
		if hex.EncodeToString(got[:]) != want {
			t.Errorf("root of %d leaves: %x, want %s", n, got, want)
		}
	}
	for n := 1; n <= len(leaves); n++ {
		root := Root(leaves[:n])
		for m := range n {
			p, err := InclusionProof(leaves[:n], m)
			if err != nil || VerifyInclusion(uint64(m), uint64(n), leaves[m], root, p) != nil {
				t.Errorf("inclusion of %d in %d: %v", m, n, err)
			}
			if m > 0 && VerifyInclusion(uint64(m-1), uint64(n), leaves[m], root, p) == nil {
				t.Errorf("inclusion of %d in %d verifies at %d", m, n, m-1)
			}
		}
		for m := 1; m <= n; m++ {
			p, err := ConsistencyProof(leaves[:n], m)
			if err != nil || VerifyConsistency(uint64(m), uint64(n), Root(leaves[:m]), root, p) != nil {
				t.Errorf("consistency %d to %d: %v", m, n, err)
			}
		}
	}
}

// The transparency-dev proof vectors, every one (inclusion and
// consistency, happy and each way a proof is wrong).
func TestTransparencyDevVectors(t *testing.T) {
	dir := filepath.Join(shared, "merkle-transparency-dev")
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") || strings.HasSuffix(p, "reference-tree.json") {
			return err
		}
		b, _ := os.ReadFile(p)
		var v struct {
			LeafIdx, TreeSize, Size1, Size2 uint64
			Root, LeafHash, Root1, Root2    string
			Proof                           []string
			WantErr                         bool
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		var err2 error
		inclusion := strings.Contains(p, "inclusion")
		switch {
		case !inclusion && v.Size1 == v.Size2 && v.Size1 > 0 && len(v.Proof) == 0 && badLength(v.Root1, v.Root2):
			// Placeholder roots a Hash cannot hold: the rule is that
			// equal sizes need equal roots.
			if v.Root1 != v.Root2 {
				err2 = errors.New("two roots for one size")
			}
		case inclusion && badLength(append([]string{v.LeafHash, v.Root}, v.Proof...)...),
			!inclusion && badLength(append([]string{v.Root1, v.Root2}, v.Proof...)...):
			err2 = errors.New("a hash that is not 32 bytes")
		case inclusion:
			err2 = VerifyInclusion(v.LeafIdx, v.TreeSize, b64(t, v.LeafHash), b64(t, v.Root), hashes(t, v.Proof))
		default:
			err2 = VerifyConsistency(v.Size1, v.Size2, b64(t, v.Root1), b64(t, v.Root2), hashes(t, v.Proof))
		}
		if (err2 != nil) != v.WantErr {
			t.Errorf("%s: %v, want an error: %v", strings.TrimPrefix(p, dir), err2, v.WantErr)
		}
		n++
		return nil
	})
	if n < 190 {
		t.Fatalf("only %d vectors read", n)
	}
}

// Real Certificate Transparency data (Google's Argon 2020 log, as x/mod's
// tlog tests keep it): leaf 10000's audit path to a tree of 961,984,013,
// and the consistency proof from the older tree.
func TestArgon2020(t *testing.T) {
	dir := filepath.Join(shared, "ct-argon2020-x-mod")
	read := func(name string, v any) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var sth struct {
		Size uint64 `json:"tree_size"`
		Root string `json:"sha256_root_hash"`
	}
	var entries struct {
		Entries []struct {
			Leaf string `json:"leaf_input"`
		} `json:"entries"`
	}
	var proof struct {
		Index uint64   `json:"leaf_index"`
		Path  []string `json:"audit_path"`
	}
	var cons struct {
		Proof []string `json:"consistency"`
	}
	read("sth.json", &sth)
	read("entries.json", &entries)
	read("proof.json", &proof)
	read("consistency.json", &cons)
	leaf, _ := base64.StdEncoding.DecodeString(entries.Entries[0].Leaf)
	root := b64(t, sth.Root)
	if err := VerifyInclusion(proof.Index, sth.Size, LeafHash(leaf), root, hashes(t, proof.Path)); err != nil {
		t.Fatalf("inclusion: %v", err)
	}
	old := b64(t, "AuIZ5V6sDUj1vn3Y1K85oOaQ7y+FJJKtyRTl1edIKBQ=")
	if err := VerifyConsistency(3654490, sth.Size, old, root, hashes(t, cons.Proof)); err != nil {
		t.Fatalf("consistency: %v", err)
	}
	if err := VerifyConsistency(3654491, sth.Size, old, root, hashes(t, cons.Proof)); !errors.Is(err, ErrProof) {
		t.Fatalf("consistency from the wrong size: %v", err)
	}
}

// BenchmarkVerifyInclusion is one item's proof in a fleet of 100,000
// (issue 14's goal: under 50 µs).
func BenchmarkVerifyInclusion(b *testing.B) {
	leaves := make([]Hash, 100_000)
	for i := range leaves {
		leaves[i] = LeafHash([]byte{byte(i), byte(i >> 8), byte(i >> 16)})
	}
	root := Root(leaves)
	p, _ := InclusionProof(leaves, 77_777)
	for b.Loop() {
		if err := VerifyInclusion(77_777, 100_000, leaves[77_777], root, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p)*32), "proof-bytes")
}
