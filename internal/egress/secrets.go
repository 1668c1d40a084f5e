package egress

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/internal/grant"
)

// Header is one injected header: its name, the secret's value, the
// secret's reference (for the decision log; the value is never logged),
// and whether it may be sent over plain HTTP.
type Header struct {
	Name  string
	Value string
	Ref   string
	Plain bool
}

// Secrets resolves every injection of s to its value: env:NAME from
// lookupEnv (the host's environment), file:/path from the file (one
// trailing newline dropped). Keys are "host:port" of the net grant. An
// unset variable, an unreadable or empty file, or a value with a line
// break is an error naming the reference, never the value.
func Secrets(s grant.Set, lookupEnv func(string) (string, bool)) (map[string][]Header, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	out := map[string][]Header{}
	for _, n := range s.Net {
		for _, in := range n.Inject {
			v, err := secretValue(in.Secret, lookupEnv)
			if err != nil {
				return nil, &SecretError{Err: fmt.Errorf("inject %s into requests to %s: %w", in.Header, n.Host, err)}
			}
			k := key(n.Host, n.Port)
			out[k] = append(out[k], Header{Name: in.Header, Value: v, Ref: in.Secret, Plain: in.Plain})
		}
	}
	return out, nil
}

// SecretError is an injection whose secret cannot be had: the run is
// refused before it starts. It is the caller's to fix (Invalid).
type SecretError struct{ Err error }

func (e *SecretError) Error() string { return e.Err.Error() }
func (e *SecretError) Unwrap() error { return e.Err }

// Invalid marks the error as the caller's (errs.Invalid).
func (e *SecretError) Invalid() bool { return true }

func secretValue(ref string, lookupEnv func(string) (string, bool)) (string, error) {
	var v string
	switch {
	case strings.HasPrefix(ref, "env:"):
		s, ok := lookupEnv(ref[4:])
		if !ok {
			return "", fmt.Errorf("secret %s: the variable is not set in sandbox's environment", ref)
		}
		v = s
	case strings.HasPrefix(ref, "file:"):
		b, err := os.ReadFile(ref[5:])
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", ref, err)
		}
		v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	default:
		return "", fmt.Errorf("secret %q: want env:NAME or file:/absolute/path", ref)
	}
	if v == "" {
		return "", fmt.Errorf("secret %s is empty", ref)
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", fmt.Errorf("secret %s contains a line break or NUL, which cannot go in a header", ref)
	}
	return v, nil
}

func key(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
