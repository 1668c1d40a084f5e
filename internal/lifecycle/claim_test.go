package lifecycle

import (
	"errors"
	"strings"
	"testing"
)

func claim() Claim {
	return Claim{Run: "run-7", Requester: "alice", Thread: "t-42", Repository: "acme/widgets", Ref: "feature/a+b", Head: strings.Repeat("ab", 20)}
}

// TestOwnerClaimAcceptsGitValidRefsWithPlus: a trusted owner claim takes
// the branch names Git takes, '+' among them, and refuses Git's reserved
// syntax, naming the rule.
func TestOwnerClaimAcceptsGitValidRefsWithPlus(t *testing.T) {
	for _, ref := range []string{"main", "feature/a+b", "c++", "release-1.2", "user/x_y", "a/b/c", "v1.0.0", "héllo", "a@b", "+x"} {
		if err := CheckRef(ref); err != nil {
			t.Errorf("%q refused: %v", ref, err)
		}
		c := claim()
		c.Ref = ref
		if err := c.Validate(); err != nil {
			t.Errorf("claim with %q: %v", ref, err)
		}
	}
	for ref, want := range map[string]string{
		"":                              "missing",
		"@":                             "HEAD",
		"-x":                            "option",
		"/a":                            "'/'",
		"a/":                            "'/'",
		"a//b":                          "empty component",
		"a..b":                          "'..'",
		"a@{1}":                         "reflog",
		"a.":                            "ends with '.'",
		"a b":                           "space",
		"a\tb":                          "control",
		"a~1":                           "reserves",
		"a^":                            "reserves",
		"a:b":                           "reserves",
		"a?":                            "reserves",
		"a*":                            "reserves",
		"a[b":                           "reserves",
		`a\b`:                           "reserves",
		".hidden":                       "beginning with '.'",
		"a/.b":                          "beginning with '.'",
		"x.lock":                        ".lock",
		"a/x.lock/b":                    ".lock",
		"refs/heads/x":                  "full ref name",
		strings.Repeat("a", MaxField+1): "more than",
	} {
		err := CheckRef(ref)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != "ref" || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error on ref saying %q", ref, err, want)
		}
	}
}

// TestOwnerClaimRefusesMalformedIdentity: every field of a claim is
// checked, and the error names the field.
func TestOwnerClaimRefusesMalformedIdentity(t *testing.T) {
	for name, mut := range map[string]func(*Claim){
		"run":        func(c *Claim) { c.Run = "" },
		"requester":  func(c *Claim) { c.Requester = "a b" },
		"thread":     func(c *Claim) { c.Thread = "x\x00y" },
		"repository": func(c *Claim) { c.Repository = strings.Repeat("r", MaxField+1) },
		"head":       func(c *Claim) { c.Head = "abc123" },
	} {
		c := claim()
		mut(&c)
		var ie *InvalidError
		if err := c.Validate(); !errors.As(err, &ie) || ie.Field != name {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := claim()
	c.Head = strings.ToUpper(c.Head)
	if c.Validate() == nil {
		t.Error("an upper-case head was taken")
	}
	c.Head = strings.Repeat("0", 64)
	if err := c.Validate(); err != nil {
		t.Errorf("a SHA-256 head: %v", err)
	}
	if claim().Digest() == c.Digest() {
		t.Error("two claims, one digest")
	}
}

// TestOriginIsCredentialFreeHTTPS: a seed's origin is an https URL with
// no credential in it; the error says what was wrong.
func TestOriginIsCredentialFreeHTTPS(t *testing.T) {
	if got, err := CheckOrigin("https://git.example.com/acme/widgets.git"); err != nil || got != "https://git.example.com/acme/widgets.git" {
		t.Fatalf("%q %v", got, err)
	}
	for o, want := range map[string]string{
		"":                                    "missing",
		"http://git.example.com/a.git":        "not an https",
		"ssh://git@git.example.com/a.git":     "not an https",
		"git@git.example.com:a.git":           "",
		"https://user:tok@git.example.com/a":  "credential",
		"https://tok@git.example.com/a":       "credential",
		"https://git.example.com/a?token=abc": "query",
		"https://git.example.com/a?":          "query",
		"https://git.example.com/a#frag":      "fragment",
		"https:///a":                          "no host",
		"https://git.example.com/a b":         "",
		"file:///etc/passwd":                  "not an https",
	} {
		_, err := CheckOrigin(o)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", o, err, want)
		}
	}
}
