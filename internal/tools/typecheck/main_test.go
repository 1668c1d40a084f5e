package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// module writes a module whose common file uses what only its linux file
// declares, and whose other file leaves a variable unused on arm64.
func module(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":          "module example.com/m\n\ngo 1.22\n",
		"p/common.go":     "package p\n\nfunc Use() int { return onlyLinux() }\n",
		"p/p_linux.go":    "package p\n\nfunc onlyLinux() int { return 1 }\n",
		"p/p_other.go":    "//go:build !linux\n\npackage p\n",
		"q/q_arm64.go":    "package q\n\nfunc F() { x := 1 }\n",
		"q/q_notarm64.go": "//go:build !arm64\n\npackage q\n",
	}
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}

func TestTypecheck(t *testing.T) {
	module(t)
	for _, c := range []struct {
		goos, goarch, pattern string
		want                  string // "" : it type-checks
	}{
		{"linux", "amd64", "./...", ""},
		{"darwin", "amd64", "./p", "undefined: onlyLinux"},
		{"linux", "arm64", "./q", "declared and not used: x"},
		{"darwin", "arm64", "./...", "undefined: onlyLinux"},
	} {
		var out strings.Builder
		n, err := check(c.goos, c.goarch, []string{c.pattern}, &out)
		if c.want == "" {
			if err != nil || n == 0 {
				t.Errorf("%s/%s %s: %d packages, %v: %s", c.goos, c.goarch, c.pattern, n, err, out.String())
			}
			continue
		}
		if err == nil || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s/%s %s: %v, output %q; want an error saying %q", c.goos, c.goarch, c.pattern, err, out.String(), c.want)
		}
	}
}

func TestMissingPackage(t *testing.T) {
	module(t)
	var out strings.Builder
	if _, err := check("linux", "amd64", []string{"./nothere"}, &out); err == nil {
		t.Fatalf("a pattern matching nothing passed: %s", out.String())
	}
}
