package locality

import (
	"regexp"
	"strings"
	"testing"
)

// regionNameSpec is what regionName decides, as the regular expression
// it replaced.
var regionNameSpec = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// TestRegionNameIsItsSpec and FuzzRegionName: regionName decides as the
// regular expression it replaced.
func TestRegionNameIsItsSpec(t *testing.T) {
	for _, n := range []string{"", "a", "eu-west-1", "-a", ".a", "_a", "A", "a.b_c-d", "a b", "é", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64), "9" + strings.Repeat("-", 62), "9" + strings.Repeat("-", 63)} {
		if got, want := regionName(n), regionNameSpec.MatchString(n); got != want {
			t.Errorf("regionName(%q) = %v, want %v", n, got, want)
		}
	}
}

func FuzzRegionName(f *testing.F) {
	for _, n := range []string{"eu-west-1", "-a", strings.Repeat("a", 64)} {
		f.Add(n)
	}
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := regionName(n), regionNameSpec.MatchString(n); got != want {
			t.Errorf("regionName(%q) = %v, want %v", n, got, want)
		}
	})
}
