package merkle

import (
	"fmt"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

func slices(hs []Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// The proofs this package makes are checked by the reference code
// (transparency-dev/merkle), and its roots are the reference hasher's:
// every leaf of trees of 1..70 leaves, every consistency pair.
func TestProofsCheckWithTheReference(t *testing.T) {
	var leaves []Hash
	for i := range 70 {
		leaves = append(leaves, LeafHash([]byte(fmt.Sprint("item ", i))))
	}
	h := rfc6962.DefaultHasher
	if got := h.HashLeaf([]byte("item 0")); string(got) != string(leaves[0][:]) {
		t.Fatal("another leaf hash than the reference's")
	}
	for n := 1; n <= len(leaves); n++ {
		root := Root(leaves[:n])
		for m := range n {
			p, _ := InclusionProof(leaves[:n], m)
			if err := proof.VerifyInclusion(h, uint64(m), uint64(n), leaves[m][:], slices(p), root[:]); err != nil {
				t.Fatalf("inclusion of %d in %d: %v", m, n, err)
			}
		}
		for m := 1; m <= n; m++ {
			p, _ := ConsistencyProof(leaves[:n], m)
			old := Root(leaves[:m])
			if err := proof.VerifyConsistency(h, uint64(m), uint64(n), slices(p), old[:], root[:]); err != nil {
				t.Fatalf("consistency %d to %d: %v", m, n, err)
			}
		}
	}
}
