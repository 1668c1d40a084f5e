package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// Claim is who owns a seeded sandbox and what it was seeded from: taken
// only from trusted context (the caller's run, the requester, the
// thread, the repository and ref asked for, and the head they resolved
// to), never from anything the sandbox ran.
type Claim struct {
	Run        string `json:"run"`
	Requester  string `json:"requester"`
	Thread     string `json:"thread"`
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	Head       string `json:"head"`
}

// InvalidError is a claim, an origin or a record field that is not
// well formed: Field names it.
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

// Invalid reports true: it is bad input.
func (e *InvalidError) Invalid() bool { return true }

func invalid(field, f string, a ...any) error {
	return &InvalidError{Field: field, Msg: fmt.Sprintf(f, a...)}
}

// MaxField is the longest identity field a claim may hold, in bytes.
const MaxField = 256

// Validate says which field of c is not well formed, if one is.
func (c Claim) Validate() error {
	for _, f := range []struct{ name, v string }{{"run", c.Run}, {"requester", c.Requester}, {"thread", c.Thread}, {"repository", c.Repository}} {
		if err := identity(f.name, f.v); err != nil {
			return err
		}
	}
	if err := CheckRef(c.Ref); err != nil {
		return err
	}
	return CheckHead(c.Head)
}

// identity is a field naming someone or something: present, bounded,
// printable, without spaces.
func identity(field, v string) error {
	switch {
	case v == "":
		return invalid(field, "missing")
	case len(v) > MaxField:
		return invalid(field, "%d bytes, more than %d", len(v), MaxField)
	case !utf8.ValidString(v):
		return invalid(field, "not UTF-8")
	}
	for i, r := range v {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return invalid(field, "a space or control character at byte %d", i)
		}
	}
	return nil
}

// CheckRef checks a branch name as Git does (git check-ref-format
// --branch): '+' and other punctuation Git allows are accepted; Git's
// reserved syntax is refused, each with the rule it breaks.
func CheckRef(ref string) error {
	const f = "ref"
	switch {
	case ref == "":
		return invalid(f, "missing")
	case len(ref) > MaxField:
		return invalid(f, "%d bytes, more than %d", len(ref), MaxField)
	case ref == "@":
		return invalid(f, `"@" alone is Git's name for HEAD`)
	case strings.HasPrefix(ref, "-"):
		return invalid(f, "%q begins with '-' (it would read as an option)", ref)
	case strings.HasPrefix(ref, "/") || strings.HasSuffix(ref, "/"):
		return invalid(f, "%q begins or ends with '/'", ref)
	case strings.Contains(ref, "//"):
		return invalid(f, "%q has an empty component ('//')", ref)
	case strings.Contains(ref, ".."):
		return invalid(f, "%q contains '..' (Git's range syntax)", ref)
	case strings.Contains(ref, "@{"):
		return invalid(f, "%q contains '@{' (Git's reflog syntax)", ref)
	case strings.HasSuffix(ref, "."):
		return invalid(f, "%q ends with '.'", ref)
	case strings.HasPrefix(ref, "refs/"):
		return invalid(f, "%q is a full ref name: give the branch name", ref)
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		if c < 0x20 || c == 0x7f || c == ' ' {
			return invalid(f, "%q has a space or control character at byte %d", ref, i)
		}
		if strings.IndexByte(`~^:?*[\`, c) >= 0 {
			return invalid(f, "%q contains %q, which Git reserves", ref, c)
		}
	}
	for _, comp := range strings.Split(ref, "/") {
		if strings.HasPrefix(comp, ".") {
			return invalid(f, "%q has a component beginning with '.'", ref)
		}
		if strings.HasSuffix(comp, ".lock") {
			return invalid(f, "%q has a component ending in '.lock'", ref)
		}
	}
	return nil
}

// CheckHead checks a commit name: a full SHA-1 or SHA-256 object name in
// lower-case hex (an abbreviation names nothing for sure).
func CheckHead(h string) error {
	if len(h) != 40 && len(h) != 64 {
		return invalid("head", "%q is not a full commit name (40 or 64 hex digits)", h)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return invalid("head", "%q is not lower-case hex", h)
		}
	}
	return nil
}

// Digest is c's identity as one string: SHA-256 over its JSON (fields
// in their fixed order), hex. Checkpoints name their owner by it.
func (c Claim) Digest() string {
	b, _ := json.Marshal(c)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// CheckOrigin checks a remote a seed is bound to: an https URL with a
// host, and no credential in it (no user or password, no query, no
// fragment, where tokens hide). It returns the URL as it will be kept.
// A bearer for it is given per fetch and never kept.
func CheckOrigin(origin string) (string, error) {
	const f = "origin"
	if origin == "" {
		return "", invalid(f, "missing")
	}
	if len(origin) > 2048 {
		return "", invalid(f, "%d bytes, more than 2048", len(origin))
	}
	u, err := url.Parse(origin)
	if err != nil {
		return "", invalid(f, "%v", err)
	}
	switch {
	case u.Scheme != "https":
		return "", invalid(f, "%q is not an https URL", origin)
	case u.User != nil:
		return "", invalid(f, "it carries a credential (user information before '@'): give a bearer per call instead, which is never kept")
	case u.Host == "" || u.Opaque != "":
		return "", invalid(f, "%q names no host", origin)
	case u.RawQuery != "" || u.ForceQuery:
		return "", invalid(f, "it has a query, where credentials hide: refused")
	case u.Fragment != "":
		return "", invalid(f, "it has a fragment")
	}
	for i := 0; i < len(origin); i++ {
		if c := origin[i]; c <= ' ' || c == 0x7f {
			return "", invalid(f, "a space or control character at byte %d", i)
		}
	}
	return u.String(), nil
}
