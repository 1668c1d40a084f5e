package key

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"

	"filippo.io/edwards25519"
)

// ErrWeak is wrapped by Check's errors: a public key that a signature
// check must not rely on.
var ErrWeak = errors.New("weak Ed25519 public key")

var identity = edwards25519.NewIdentityPoint()

// Check refuses a public key that is not a canonical encoding of a curve
// point, or whose point has small order (it lies in the subgroup of order
// 8, the identity among them). With a small-order key A, [k]A is one of
// eight points whatever the message, so a signature can be made without
// the private key: the identity key 01 00…00 accepts R = [S]B for any S
// and any message.
func (p Public) Check() error {
	if strong.has(p) {
		return nil
	}
	if err := p.check(); err != nil {
		return err
	}
	strong.add(p)
	return nil
}

// strong remembers keys that passed Check. A verifier sees the same few
// signers again and again, and decompressing a point is an eighth of an
// attestation check. The cache is direct-mapped and bounded: a flood of
// new keys only evicts, it cannot grow it. Only keys that passed are
// kept, so an entry can never make a weak key pass.
var strong keyCache

type keyCache struct {
	mu    sync.Mutex
	slots [64]Public
	used  [64]bool
}

func (c *keyCache) slot(p Public) int { return int(p[1]) % len(c.slots) }

func (c *keyCache) has(p Public) bool {
	i := c.slot(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used[i] && c.slots[i] == p
}

func (c *keyCache) add(p Public) {
	i := c.slot(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slots[i], c.used[i] = p, true
}

func (p Public) check() error {
	var pt edwards25519.Point
	if _, err := pt.SetBytes(p[:]); err != nil {
		return fmt.Errorf("%w: not a point on the curve", ErrWeak)
	}
	if !bytes.Equal(pt.Bytes(), p[:]) {
		return fmt.Errorf("%w: not the canonical encoding of its point", ErrWeak)
	}
	var c edwards25519.Point
	if c.MultByCofactor(&pt).Equal(identity) == 1 {
		return fmt.Errorf("%w: a point of small order", ErrWeak)
	}
	return nil
}

// order is L, the order of the prime subgroup, little-endian.
var order = [32]byte{
	0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
}

// ErrNonCanonicalSignature is returned for a signature whose S is not
// below L: RFC 8032 requires S < L; S + L verifies the same equation, so
// accepting it makes signatures malleable.
var ErrNonCanonicalSignature = errors.New("non-canonical Ed25519 signature (S is not below the group order L)")

// CheckSignature refuses a signature of the wrong length or whose S is
// not canonical.
func CheckSignature(sig []byte) error {
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("an Ed25519 signature is %d bytes, not %d", ed25519.SignatureSize, len(sig))
	}
	s := sig[32:]
	for i := 31; i >= 0; i-- {
		switch {
		case s[i] < order[i]:
			return nil
		case s[i] > order[i]:
			return ErrNonCanonicalSignature
		}
	}
	return ErrNonCanonicalSignature // S == L
}
