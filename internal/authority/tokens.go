package authority

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MinToken is the fewest characters a bearer token has.
const MinToken = 16

// MaxTokenFile bounds a token file's bytes.
const MaxTokenFile = 1 << 20

// Token is a bearer token and the policy of the principal it is.
type Token struct {
	Secret string
	// PolicyFile is where its policy was read ("": none, the Default).
	PolicyFile string
	Policy     Policy
}

// ReadTokens reads a token file: one token per line, optionally
// followed by the path of its policy document (relative to the token
// file's directory); blank lines and lines starting with '#' are
// skipped. A token without a policy gets Default.
//
//	# token                                  policy
//	3c1f0b8e2a7d4c95b6e1f0a2d3c4b5a6         alice.json
//	9f8e7d6c5b4a39281706f5e4d3c2b1a0
func ReadTokens(path string) ([]Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseTokens(b, func(p string) ([]byte, error) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(path), p)
		}
		return os.ReadFile(p)
	})
}

// ParseTokens reads a token file's bytes; read reads a policy file it
// names.
func ParseTokens(b []byte, read func(path string) ([]byte, error)) ([]Token, error) {
	if len(b) > MaxTokenFile {
		return nil, fmt.Errorf("token file: %d bytes; at most %d", len(b), MaxTokenFile)
	}
	var out []Token
	seen := map[string]int{}
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		where := fmt.Sprintf("token file line %d", i+1)
		if len(f) > 2 {
			return nil, fmt.Errorf("%s: %d fields; want a token and, optionally, its policy file", where, len(f))
		}
		t := Token{Secret: f[0], Policy: Default()}
		if len(t.Secret) < MinToken {
			return nil, fmt.Errorf("%s: a token of %d characters; want at least %d", where, len(t.Secret), MinToken)
		}
		if j, ok := seen[t.Secret]; ok {
			return nil, fmt.Errorf("%s: the token of line %d again", where, j)
		}
		seen[t.Secret] = i + 1
		if len(f) == 2 {
			t.PolicyFile = f[1]
			pb, err := read(f[1])
			if err != nil {
				return nil, fmt.Errorf("%s: policy %s: %w", where, f[1], err)
			}
			if t.Policy, err = Parse(pb); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", where, f[1], err)
			}
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("token file: it holds no token")
	}
	return out, nil
}

// Header is the HTTP request header in which a caller asks to be held
// to a narrower policy than its own: the policy document, base64url
// without padding. An MCP server sends its connection's on every call.
const Header = "Sandbox-Policy"

// EncodeHeader is Header's value for the policy document doc.
func EncodeHeader(doc []byte) string { return base64.RawURLEncoding.EncodeToString(doc) }

// DecodeHeader reads Header's value.
func DecodeHeader(v string) (Policy, error) {
	if len(v) > 2*MaxPolicy {
		return Policy{}, &PolicyError{Where: Header, Why: "too long"}
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return Policy{}, &PolicyError{Where: Header, Why: "not base64url without padding: " + err.Error()}
	}
	p, err := Parse(b)
	if err != nil {
		return Policy{}, fmt.Errorf("header %s: %w", Header, err)
	}
	return p, nil
}

type narrowKey struct{}

// WithNarrowing is ctx carrying n: the host holds the caller to it as
// well as to its own policy.
func WithNarrowing(ctx context.Context, n Policy) context.Context {
	return context.WithValue(ctx, narrowKey{}, append(Narrowings(ctx), n))
}

// Narrowings are the policies ctx carries (WithNarrowing).
func Narrowings(ctx context.Context) []Policy {
	if ctx == nil {
		return nil
	}
	l, _ := ctx.Value(narrowKey{}).([]Policy)
	return append([]Policy(nil), l...)
}
