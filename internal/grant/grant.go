package grant

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/energy"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/tier"
)

// Type is the type tag of a grant set's canonical JSON.
const Type = "sandbox.grants/1"

// Mode is read-only or read-write access.
type Mode string

// The modes.
const (
	RO Mode = "ro"
	RW Mode = "rw"
)

// Set is a unit's grants. The zero value grants nothing.
type Set struct {
	Type    string    `json:"type"`
	Net     []Net     `json:"net,omitempty"`
	Storage []Storage `json:"storage,omitempty"`
	KV      []KV      `json:"kv,omitempty"`
	Clock   bool      `json:"clock,omitempty"`
	Random  bool      `json:"random,omitempty"`
	Exec    Exec      `json:"exec"`
	Compute []Compute `json:"compute,omitempty"`
	// Kernel asks for a kernel boundary of the unit's own (S5 or above).
	Kernel bool `json:"kernel,omitempty"`
	// Confidential asks for a TEE whose report is verified (S6 or above).
	Confidential bool `json:"confidential,omitempty"`
	// Locality pins the run to a named place with a durable audit trail (S7).
	Locality string `json:"locality,omitempty"`
}

// Net grants connections to one host and port.
type Net struct {
	Host   string   `json:"host"` // lower-case DNS name or IP literal
	Port   int      `json:"port"`
	Inject []Inject `json:"inject,omitempty"`
}

// Inject names a secret the host adds to requests to a Net grant's host.
// The secret goes only over TLS, to a server whose certificate verifies,
// unless Plain says plain HTTP is allowed for this host and port (a test
// server on loopback, say).
type Inject struct {
	Header string `json:"header"`
	Secret string `json:"secret"` // "env:NAME" or "file:/absolute/path"
	Plain  bool   `json:"plain,omitempty"`
}

// StorageError refuses a storage grant as given: the executor cannot
// honour it (a link on its path, a place no grant may reach). It is
// invalid input.
type StorageError struct {
	Grant Storage
	Err   error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("storage grant fs:%s:%s: %v", e.Grant.Path, e.Grant.Mode, e.Err)
}

// Unwrap returns the reason.
func (e *StorageError) Unwrap() error { return e.Err }

// Invalid reports true: the grant cannot be honoured as given.
func (e *StorageError) Invalid() bool { return true }

// NotADirectory is the reason a storage grant naming a file is refused,
// at every tier alike: storage grants are directories.
func NotADirectory(path string) error {
	return fmt.Errorf("%s is not a directory: storage grants are directories (grant the directory that holds it)", path)
}

// Storage grants a directory tree on the host, visible to the unit at the
// same absolute path.
type Storage struct {
	Path string `json:"path"`
	Mode Mode   `json:"mode"`
	// Quota bounds the bytes of I/O through this grant: bytes written for
	// rw, bytes read for ro. Zero means no quota.
	Quota int64 `json:"quota,omitempty"`
}

// KV grants a key-value namespace.
type KV struct {
	Namespace string `json:"namespace"`
	Mode      Mode   `json:"mode"`
}

// Exec holds the exec allow and deny lists, by content address.
type Exec struct {
	Allow []addr.Addr `json:"allow"`
	Deny  []addr.Addr `json:"deny"`
}

// Compute grants one device class with a joule budget.
type Compute struct {
	Class  device.Class       `json:"class"`
	Budget energy.Microjoules `json:"budget_uj"`
}

// Error is a malformed or conflicting grant: which grant, which field, why.
type Error struct {
	Grant string
	Field string
	Why   string
}

func (e *Error) Error() string {
	s := "grant"
	if e.Grant != "" {
		s += " " + strconv.Quote(e.Grant)
	}
	if e.Field != "" {
		s += ": field " + e.Field
	}
	return s + ": " + e.Why
}

// Category names its category in the one map (internal/errs).
func (e *Error) Category() string { return "invalid" }

// Normalize validates s and puts it in canonical form: lists sorted,
// identical entries merged, conflicting ones refused, Type set.
func (s *Set) Normalize() error {
	s.Type = Type
	for i := range s.Net {
		n := &s.Net[i]
		h, err := normHost(n.Host)
		if err != nil {
			return &Error{Grant: "net:" + n.Host, Field: "host", Why: err.Error()}
		}
		n.Host = h
		if n.Port < 1 || n.Port > 65535 {
			return &Error{Grant: fmt.Sprintf("net:%s:%d", n.Host, n.Port), Field: "port", Why: "want 1..65535"}
		}
		for _, in := range n.Inject {
			if err := checkInject(in); err != nil {
				return &Error{Grant: n.String(), Field: "inject", Why: err.Error()}
			}
		}
		sort.Slice(n.Inject, func(a, b int) bool { return n.Inject[a].Header < n.Inject[b].Header })
		// One value per header (names are case-insensitive): the same
		// injection twice is one, two values are a conflict.
		var kept []Inject
		for _, in := range n.Inject {
			dup := false
			for _, k := range kept {
				if strings.EqualFold(k.Header, in.Header) {
					if k != in {
						return &Error{Grant: n.String(), Field: "inject", Why: fmt.Sprintf("header %s is injected twice, from %s and %s (or once over plain HTTP and once not)", in.Header, k.Secret, in.Secret)}
					}
					dup = true
				}
			}
			if !dup {
				kept = append(kept, in)
			}
		}
		n.Inject = kept
	}
	sort.Slice(s.Net, func(a, b int) bool {
		if s.Net[a].Host != s.Net[b].Host {
			return s.Net[a].Host < s.Net[b].Host
		}
		return s.Net[a].Port < s.Net[b].Port
	})
	var err error
	if s.Net, err = merge(s.Net, func(n Net) string { return n.String() }, "net"); err != nil {
		return err
	}
	for i := range s.Storage {
		st := &s.Storage[i]
		if !filepath.IsAbs(st.Path) || filepath.Clean(st.Path) != st.Path {
			return &Error{Grant: "fs:" + st.Path, Field: "path", Why: "must be absolute and clean (no trailing slash, '.' or '..')"}
		}
		if st.Mode != RO && st.Mode != RW {
			return &Error{Grant: "fs:" + st.Path, Field: "mode", Why: fmt.Sprintf("%q: want ro or rw", st.Mode)}
		}
		if st.Quota < 0 {
			return &Error{Grant: "fs:" + st.Path, Field: "quota", Why: "negative"}
		}
	}
	sort.Slice(s.Storage, func(a, b int) bool { return s.Storage[a].Path < s.Storage[b].Path })
	if s.Storage, err = merge(s.Storage, func(st Storage) string { return st.Path }, "fs"); err != nil {
		return err
	}
	for _, kv := range s.KV {
		if err := checkNamespace(kv.Namespace); err != nil {
			return &Error{Grant: "kv:" + kv.Namespace, Field: "namespace", Why: err.Error()}
		}
		if kv.Mode != RO && kv.Mode != RW {
			return &Error{Grant: "kv:" + kv.Namespace, Field: "mode", Why: fmt.Sprintf("%q: want ro or rw", kv.Mode)}
		}
	}
	sort.Slice(s.KV, func(a, b int) bool { return s.KV[a].Namespace < s.KV[b].Namespace })
	if s.KV, err = merge(s.KV, func(kv KV) string { return kv.Namespace }, "kv"); err != nil {
		return err
	}
	s.Exec.Allow = sortAddrs(s.Exec.Allow)
	s.Exec.Deny = sortAddrs(s.Exec.Deny)
	for _, c := range s.Compute {
		if !c.Class.Valid() {
			return &Error{Grant: string(c.Class), Field: "class", Why: "unknown device class"}
		}
		if c.Budget == 0 {
			return &Error{Grant: string(c.Class), Field: "budget_uj", Why: "a compute grant carries a joule budget above zero"}
		}
		if c.Budget > 1<<53-1 {
			return &Error{Grant: string(c.Class), Field: "budget_uj", Why: "budget above 2^53-1 µJ"}
		}
	}
	sort.Slice(s.Compute, func(a, b int) bool { return s.Compute[a].Class.Rank() < s.Compute[b].Class.Rank() })
	if s.Compute, err = merge(s.Compute, func(c Compute) string { return string(c.Class) }, "compute"); err != nil {
		return err
	}
	if s.Locality != "" {
		if err := checkNamespace(s.Locality); err != nil {
			return &Error{Grant: "locality:" + s.Locality, Field: "locality", Why: err.Error()}
		}
	}
	return nil
}

// merge drops exact duplicates from a sorted list and refuses two different
// entries with the same key.
func merge[T any](list []T, keyOf func(T) string, kind string) ([]T, error) {
	out := list[:0]
	for _, x := range list {
		if n := len(out); n > 0 && keyOf(out[n-1]) == keyOf(x) {
			a, _ := jcs.Marshal(out[n-1])
			b, _ := jcs.Marshal(x)
			if !bytes.Equal(a, b) {
				return nil, &Error{Grant: kind + ":" + keyOf(x), Why: fmt.Sprintf("granted twice with different terms: %s and %s", a, b)}
			}
			continue
		}
		out = append(out, x)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func sortAddrs(as []addr.Addr) []addr.Addr {
	out := slices.Clone(as)
	slices.SortFunc(out, func(a, b addr.Addr) int { return bytes.Compare(a[:], b[:]) })
	out = slices.Compact(out)
	if out == nil {
		out = []addr.Addr{}
	}
	return out
}

// String returns the command-line form of a net grant.
func (n Net) String() string {
	return "net:" + net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
}

// Canonical returns the canonical JSON of s and its content address. s must
// have been normalized.
func (s Set) Canonical() ([]byte, addr.Addr, error) {
	c := s.Clone() // Normalize sorts in place: never the caller's slices
	if err := c.Normalize(); err != nil {
		return nil, addr.Addr{}, err
	}
	b, err := jcs.Marshal(c)
	if err != nil {
		return nil, addr.Addr{}, err
	}
	return b, addr.Of(b), nil
}

// Clone is a copy of s that shares no slice with it: a Set held by an
// Enforcer that serves requests (a live sandbox's proxy) may be read
// while a copy of it is normalized.
func (s Set) Clone() Set {
	c := s
	c.Net = make([]Net, len(s.Net))
	for i, n := range s.Net {
		n.Inject = slices.Clone(n.Inject)
		c.Net[i] = n
	}
	if s.Net == nil {
		c.Net = nil
	}
	c.Storage = slices.Clone(s.Storage)
	c.KV = slices.Clone(s.KV)
	c.Compute = slices.Clone(s.Compute)
	c.Exec.Allow = slices.Clone(s.Exec.Allow)
	c.Exec.Deny = slices.Clone(s.Exec.Deny)
	return c
}

// Needs returns the tier requirements the grants place on a unit.
func (s Set) Needs() []tier.Need {
	var out []tier.Need
	if s.Kernel {
		out = append(out, tier.Need{Tier: tier.S5, Why: "grant kernel asks for a kernel boundary of the unit's own (S5, MicroVM)"})
	}
	if s.Confidential {
		out = append(out, tier.Need{Tier: tier.S6, Why: "grant confidential asks for a verified TEE (S6, Confidential)"})
	}
	if s.Locality != "" {
		out = append(out, tier.Need{Tier: tier.S7, Why: fmt.Sprintf("grant locality:%s asks for locality pinning and a durable audit trail (S7, Sovereign)", s.Locality)})
	}
	return out
}

// Budget returns the joule budget for class c, and whether c is granted.
func (s Set) Budget(c device.Class) (energy.Microjoules, bool) {
	for _, g := range s.Compute {
		if g.Class == c {
			return g.Budget, true
		}
	}
	return 0, false
}

func normHost(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host")
	}
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
		return ip.String(), nil
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if len(h) > 253 {
		return "", fmt.Errorf("%q is longer than 253 characters", h)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", fmt.Errorf("%q is not a DNS name (empty or overlong label)", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("%q is not a DNS name or IP address (character %q)", h, c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("%q is not a DNS name (a label starts or ends with '-')", h)
		}
	}
	return h, nil
}

func checkInject(in Inject) error {
	if in.Header == "" || strings.ContainsAny(in.Header, " \t\r\n:") {
		return fmt.Errorf("header name %q is not a valid HTTP header name", in.Header)
	}
	switch {
	case strings.HasPrefix(in.Secret, "env:") && len(in.Secret) > 4:
		if strings.ContainsAny(in.Secret[4:], "= \t\n") {
			return fmt.Errorf("secret reference %q: not an environment variable name", in.Secret)
		}
	case strings.HasPrefix(in.Secret, "file:") && filepath.IsAbs(in.Secret[5:]):
	default:
		return fmt.Errorf("secret must be a reference, env:NAME or file:/absolute/path (never the value itself)")
	}
	return nil
}

func checkNamespace(ns string) error {
	if ns == "" || len(ns) > 128 {
		return fmt.Errorf("want 1 to 128 characters")
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q: character %q; use letters, digits, '-', '_' and '.'", ns, c)
		}
	}
	if ns == "." || ns == ".." {
		return fmt.Errorf("%q is not a name", ns)
	}
	return nil
}
