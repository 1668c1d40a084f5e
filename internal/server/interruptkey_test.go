package server

import (
	"regexp"
	"strings"
	"testing"
)

// interruptKeySpec is what interruptKey decides, as the regular
// expression it replaced.
var interruptKeySpec = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// TestInterruptKeyIsItsSpec and FuzzInterruptKey: interruptKey decides
// as the regular expression it replaced.
func TestInterruptKeyIsItsSpec(t *testing.T) {
	for _, k := range []string{"", "short", strings.Repeat("a", 15), strings.Repeat("a", 16), strings.Repeat("Z_-9", 32), strings.Repeat("a", 129), strings.Repeat("a", 16) + " ", strings.Repeat("é", 10), strings.Repeat("a", 20) + "\n"} {
		if got, want := interruptKey(k), interruptKeySpec.MatchString(k); got != want {
			t.Errorf("interruptKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func FuzzInterruptKey(f *testing.F) {
	for _, k := range []string{strings.Repeat("a", 16), "x", strings.Repeat("-", 128)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if got, want := interruptKey(k), interruptKeySpec.MatchString(k); got != want {
			t.Errorf("interruptKey(%q) = %v, want %v", k, got, want)
		}
	})
}
