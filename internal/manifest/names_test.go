package manifest

import (
	"regexp"
	"testing"
)

// The patterns the checks were written from, as the devcontainer and
// OCI specifications state them.
var (
	digestRefRE = regexp.MustCompile(`^[^@\s]+@sha256:[0-9a-f]{64}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userNameRE  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

func FuzzNames(f *testing.F) {
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, s := range []string{"", "a", "_", "9", "A9_", "9a", "a-b.c", ".a", "-a", "a b", "é",
		"alpine@sha256:" + hex, "@sha256:" + hex, "a@b@sha256:" + hex, "a b@sha256:" + hex,
		"alpine@sha256:" + hex[1:], "alpine@sha256:" + hex + "0", "alpine@sha256:" + hex[:63] + "G", "a\t@sha256:" + hex} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Pinned(s), digestRefRE.MatchString(s); got != want {
			t.Errorf("Pinned(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := envName(s), envNameRE.MatchString(s); got != want {
			t.Errorf("envName(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := userName(s), userNameRE.MatchString(s); got != want {
			t.Errorf("userName(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
