package key

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
)

// Text-form prefixes.
const (
	PublicPrefix  = "ed25519:"
	PrivatePrefix = "ed25519-seed:"
)

// ErrSyntax is wrapped by every parse error in this package.
var ErrSyntax = errors.New("malformed key")

// Public is an Ed25519 public key.
type Public [ed25519.PublicKeySize]byte

// ID returns the key's identifier: the content address of its bytes.
func (p Public) ID() addr.Addr { return addr.Of(p[:]) }

// String returns the text form "ed25519:<hex>".
func (p Public) String() string { return PublicPrefix + hex.EncodeToString(p[:]) }

// Verify reports whether sig is p's signature of msg, under RFC 8032's
// strict rules: never for a weak key (Check) or a non-canonical
// signature (CheckSignature).
func (p Public) Verify(msg, sig []byte) bool {
	return CheckSignature(sig) == nil && p.Check() == nil && ed25519.Verify(p[:], msg, sig)
}

// MarshalText implements encoding.TextMarshaler.
func (p Public) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: the syntax of
// ParsePublic only. A record's signer is decoded first and checked by
// its verifier (Check), so that a weak key is refused by name.
func (p *Public) UnmarshalText(b []byte) error {
	k, err := parsePublic(string(b))
	if err != nil {
		return err
	}
	*p = k
	return nil
}

// ParsePublic reads the text form "ed25519:" + 64 lowercase hex digits,
// and refuses a weak key (Check).
func ParsePublic(s string) (Public, error) {
	p, err := parsePublic(s)
	if err != nil {
		return Public{}, err
	}
	if err := p.Check(); err != nil {
		return Public{}, fmt.Errorf("%q: %w", clip(s), err)
	}
	return p, nil
}

func parsePublic(s string) (Public, error) {
	var p Public
	h, ok := strings.CutPrefix(s, PublicPrefix)
	if !ok || len(h) != 2*len(p) || strings.ToLower(h) != h {
		return p, fmt.Errorf("%w: %q: want %q followed by 64 lowercase hex digits", ErrSyntax, clip(s), PublicPrefix)
	}
	if _, err := hex.Decode(p[:], []byte(h)); err != nil {
		return p, fmt.Errorf("%w: %q: %v", ErrSyntax, clip(s), err)
	}
	return p, nil
}

// Private is an Ed25519 private key.
type Private struct {
	seed [ed25519.SeedSize]byte
	priv ed25519.PrivateKey
}

// FromSeed returns the key derived from a 32-byte RFC 8032 seed.
func FromSeed(seed []byte) (Private, error) {
	var k Private
	if len(seed) != ed25519.SeedSize {
		return k, fmt.Errorf("%w: seed is %d bytes, want %d", ErrSyntax, len(seed), ed25519.SeedSize)
	}
	copy(k.seed[:], seed)
	k.priv = ed25519.NewKeyFromSeed(seed)
	return k, nil
}

// Generate makes a new key from rand (crypto/rand.Reader in production).
func Generate(rand io.Reader) (Private, error) {
	var seed [ed25519.SeedSize]byte
	if _, err := io.ReadFull(rand, seed[:]); err != nil {
		return Private{}, fmt.Errorf("key: read randomness: %w", err)
	}
	return FromSeed(seed[:])
}

// IsZero reports whether k holds no key.
func (k Private) IsZero() bool { return k.priv == nil }

// Public returns k's public key.
func (k Private) Public() Public {
	var p Public
	copy(p[:], k.priv[ed25519.SeedSize:])
	return p
}

// Sign returns k's signature of msg.
func (k Private) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// Ed25519 returns the standard library form of k, for libraries that take a
// crypto.Signer.
func (k Private) Ed25519() ed25519.PrivateKey { return k.priv }

// Derive returns a 32-byte key for one purpose, derived from k with
// BLAKE3's key derivation (derive_key) under context, a string that names
// the purpose and its version. Keys for different contexts are
// independent; none reveals k.
func (k Private) Derive(context string) [32]byte {
	var out [32]byte
	blake3.DeriveKey(context, k.seed[:], out[:])
	return out
}

// MarshalText returns the private text form "ed25519-seed:<hex>".
func (k Private) MarshalText() []byte {
	return []byte(PrivatePrefix + hex.EncodeToString(k.seed[:]) + "\n")
}

// ParsePrivate reads the private text form written by MarshalText.
func ParsePrivate(b []byte) (Private, error) {
	s := strings.TrimSpace(string(b))
	h, ok := strings.CutPrefix(s, PrivatePrefix)
	if !ok || len(h) != 2*ed25519.SeedSize {
		return Private{}, fmt.Errorf("%w: want %q followed by 64 hex digits", ErrSyntax, PrivatePrefix)
	}
	seed, err := hex.DecodeString(h)
	if err != nil {
		return Private{}, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return FromSeed(seed)
}

// Trust is the set of public keys a verifier accepts signatures from. The
// zero value trusts nothing.
type Trust struct {
	keys map[addr.Addr]Public
}

// NewTrust returns a set holding keys.
func NewTrust(keys ...Public) Trust {
	t := Trust{keys: map[addr.Addr]Public{}}
	for _, k := range keys {
		t.keys[k.ID()] = k
	}
	return t
}

// Add puts k in the set.
func (t *Trust) Add(k Public) {
	if t.keys == nil {
		t.keys = map[addr.Addr]Public{}
	}
	t.keys[k.ID()] = k
}

// Trusts reports whether k is in the set.
func (t Trust) Trusts(k Public) bool {
	_, ok := t.keys[k.ID()]
	return ok
}

// Len returns the number of keys in the set.
func (t Trust) Len() int { return len(t.keys) }

// Keys returns the keys in the set, ordered by ID.
func (t Trust) Keys() []Public {
	out := make([]Public, 0, len(t.keys))
	for _, k := range t.keys {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i][:], out[j][:]) < 0 })
	return out
}

// ParseTrustArg reads one --trust argument: a key in text form, or the path
// of a file holding keys in text form, one per line (blank lines and lines
// starting with '#' are ignored).
func ParseTrustArg(arg string) ([]Public, error) {
	if strings.HasPrefix(arg, PublicPrefix) {
		k, err := ParsePublic(arg)
		if err != nil {
			return nil, err
		}
		return []Public{k}, nil
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, fmt.Errorf("--trust %s: not a key (%q...) and not a readable file: %w", arg, PublicPrefix, err)
	}
	defer f.Close()
	var out []Public
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParsePublic(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", arg, n, err)
		}
		out = append(out, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", arg, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w: no key in the file", arg, ErrSyntax)
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
