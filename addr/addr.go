package addr

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zeebo/blake3"
)

// Size is the length in bytes of an Addr.
const Size = 32

// Prefix names the hash algorithm in the text form.
const Prefix = "b3:"

// textLen is the length of the text form: prefix plus 64 hex digits.
const textLen = len(Prefix) + 2*Size

// Addr is a BLAKE3-256 content address.
type Addr [Size]byte

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("malformed content address")

// Of returns the address of b.
func Of(b []byte) Addr { return Addr(blake3.Sum256(b)) }

// OfReader returns the address of everything r yields.
func OfReader(r io.Reader) (Addr, error) {
	h := blake3.New()
	if _, err := io.Copy(h, r); err != nil {
		return Addr{}, err
	}
	var a Addr
	h.Sum(a[:0])
	return a, nil
}

// OfFile returns the address of the contents of the file at path.
func OfFile(path string) (Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return Addr{}, err
	}
	defer f.Close()
	a, err := OfReader(f)
	if err != nil {
		return Addr{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return a, nil
}

// Parse reads the text form "b3:" + 64 lowercase hex digits.
func Parse(s string) (Addr, error) {
	var a Addr
	if len(s) != textLen || s[:len(Prefix)] != Prefix {
		return a, fmt.Errorf("%w: %q: want %q followed by 64 lowercase hex digits", ErrSyntax, clip(s), Prefix)
	}
	for i := len(Prefix); i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return a, fmt.Errorf("%w: %q: character %d is %q, want lowercase hex", ErrSyntax, clip(s), i, c)
		}
	}
	if _, err := hex.Decode(a[:], []byte(s[len(Prefix):])); err != nil {
		return a, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return a, nil
}

// MustParse is Parse for constants in tests and tables; it panics on error.
func MustParse(s string) Addr {
	a, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return a
}

// String returns the text form.
func (a Addr) String() string {
	var b [textLen]byte
	copy(b[:], Prefix)
	hex.Encode(b[len(Prefix):], a[:])
	return string(b[:])
}

// Hex returns the 64 hex digits without the prefix, as used in file names.
func (a Addr) Hex() string { return hex.EncodeToString(a[:]) }

// Short returns the first 12 hex digits, for people to read; it is not an
// identifier and nothing parses it.
func (a Addr) Short() string { return a.Hex()[:12] }

// IsZero reports whether a is the zero Addr, which records use for "absent".
func (a Addr) IsZero() bool { return a == Addr{} }

// MarshalText implements encoding.TextMarshaler with the text form.
func (a Addr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (a *Addr) UnmarshalText(b []byte) error {
	p, err := Parse(string(b))
	if err != nil {
		return err
	}
	*a = p
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Hasher computes an Addr incrementally; it is an io.Writer.
type Hasher struct{ h *blake3.Hasher }

// NewHasher returns an empty Hasher.
func NewHasher() *Hasher { return &Hasher{h: blake3.New()} }

// Write adds p to the hashed content.
func (h *Hasher) Write(p []byte) (int, error) { return h.h.Write(p) }

// Sum returns the address of everything written so far.
func (h *Hasher) Sum() Addr {
	var a Addr
	h.h.Sum(a[:0])
	return a
}
