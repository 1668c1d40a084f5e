package merkle

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/bits"
)

// Hash is a SHA-256 digest.
type Hash = [32]byte

// LeafHash is SHA-256(0x00 ‖ data).
func LeafHash(data []byte) Hash {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(data)
	var out Hash
	h.Sum(out[:0])
	return out
}

// NodeHash is SHA-256(0x01 ‖ l ‖ r).
func NodeHash(l, r Hash) Hash {
	var b [65]byte
	b[0] = 1
	copy(b[1:], l[:])
	copy(b[33:], r[:])
	return sha256.Sum256(b[:])
}

// split is the largest power of two below n (n > 1).
func split(n int) int { return 1 << (bits.Len(uint(n-1)) - 1) }

// Root is the tree hash (MTH) over leaf hashes; of no leaves, SHA-256("").
func Root(leaves []Hash) Hash {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	}
	k := split(len(leaves))
	return NodeHash(Root(leaves[:k]), Root(leaves[k:]))
}

// InclusionProof is the audit path of leaf m in the tree of leaves
// (RFC 9162 §2.1.3.1).
func InclusionProof(leaves []Hash, m int) ([]Hash, error) {
	if m < 0 || m >= len(leaves) {
		return nil, fmt.Errorf("merkle: leaf %d of a tree of %d", m, len(leaves))
	}
	return path(m, leaves), nil
}

func path(m int, d []Hash) []Hash {
	if len(d) <= 1 {
		return nil
	}
	k := split(len(d))
	if m < k {
		return append(path(m, d[:k]), Root(d[k:]))
	}
	return append(path(m-k, d[k:]), Root(d[:k]))
}

// ConsistencyProof proves that the tree of the first m leaves is a
// prefix of the tree of all of them (RFC 9162 §2.1.4.1).
func ConsistencyProof(leaves []Hash, m int) ([]Hash, error) {
	if m <= 0 || m > len(leaves) {
		return nil, fmt.Errorf("merkle: a consistency proof from size %d to %d", m, len(leaves))
	}
	return subproof(m, leaves, true), nil
}

func subproof(m int, d []Hash, b bool) []Hash {
	n := len(d)
	if m == n {
		if b {
			return nil
		}
		return []Hash{Root(d)}
	}
	k := split(n)
	if m <= k {
		return append(subproof(m, d[:k], b), Root(d[k:]))
	}
	return append(subproof(m-k, d[k:], false), Root(d[:k]))
}

// Errors a proof fails with.
var (
	ErrProof = errors.New("merkle: the proof does not verify")
	ErrRange = errors.New("merkle: an index or size out of range")
)

// VerifyInclusion checks that leaf is at index in the tree of size whose
// root is root (RFC 9162 §2.1.3.2).
func VerifyInclusion(index, size uint64, leaf, root Hash, proof []Hash) error {
	if index >= size {
		return fmt.Errorf("%w: leaf %d of a tree of %d", ErrRange, index, size)
	}
	fn, sn, r := index, size-1, leaf
	for _, p := range proof {
		if sn == 0 {
			return fmt.Errorf("%w: longer than the tree is deep", ErrProof)
		}
		if fn&1 == 1 || fn == sn {
			r = NodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			r = NodeHash(r, p)
		}
		fn, sn = fn>>1, sn>>1
	}
	if sn != 0 {
		return fmt.Errorf("%w: shorter than the tree is deep", ErrProof)
	}
	if r != root {
		return fmt.Errorf("%w: it leads to another root", ErrProof)
	}
	return nil
}

// VerifyConsistency checks that the tree of size1 with root1 is a prefix
// of the tree of size2 with root2 (RFC 9162 §2.1.4.2).
func VerifyConsistency(size1, size2 uint64, root1, root2 Hash, proof []Hash) error {
	switch {
	case size1 == 0:
		return fmt.Errorf("%w: a proof from size 0 proves nothing", ErrRange)
	case size1 > size2:
		return fmt.Errorf("%w: size %d after size %d", ErrRange, size2, size1)
	case size1 == size2:
		if len(proof) != 0 {
			return fmt.Errorf("%w: equal sizes take an empty proof", ErrProof)
		}
		if root1 != root2 {
			return fmt.Errorf("%w: two roots for one size", ErrProof)
		}
		return nil
	case len(proof) == 0:
		return fmt.Errorf("%w: empty", ErrProof)
	}
	if size1&(size1-1) == 0 { // a power of two: the old root is the first node
		proof = append([]Hash{root1}, proof...)
	}
	fn, sn := size1-1, size2-1
	for fn&1 == 1 {
		fn, sn = fn>>1, sn>>1
	}
	fr, sr := proof[0], proof[0]
	for _, c := range proof[1:] {
		if sn == 0 {
			return fmt.Errorf("%w: longer than the tree is deep", ErrProof)
		}
		if fn&1 == 1 || fn == sn {
			fr, sr = NodeHash(c, fr), NodeHash(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			sr = NodeHash(sr, c)
		}
		fn, sn = fn>>1, sn>>1
	}
	if sn != 0 {
		return fmt.Errorf("%w: shorter than the tree is deep", ErrProof)
	}
	if fr != root1 || sr != root2 {
		return fmt.Errorf("%w: it leads to other roots", ErrProof)
	}
	return nil
}
