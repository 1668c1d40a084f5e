//go:build linux

package hostpath

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenRefusesLinks(t *testing.T) {
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "real", "sub"), 0o755)
	os.WriteFile(filepath.Join(d, "real", "file"), []byte("x"), 0o644)
	os.Symlink("real", filepath.Join(d, "rel"))
	os.Symlink(filepath.Join(d, "real"), filepath.Join(d, "abs"))
	os.Symlink("../../../../../../etc", filepath.Join(d, "real", "up"))
	os.Symlink("/proc", filepath.Join(d, "real", "p"))
	tests := []struct {
		path string
		at   string // "" when it must open
	}{
		{d + "/real", ""},
		{d + "/real/sub", ""},
		{d + "/real/file", ""},
		{d + "/rel", d + "/rel"},
		{d + "/rel/sub", d + "/rel"},
		{d + "/abs/sub", d + "/abs"},
		{d + "/real/up", d + "/real/up"},
		{d + "/real/p/1", d + "/real/p"},
		{"/proc/self/root", "/proc/self"},
		{"/proc/1/root", "/proc/1/root"},
		{"/proc/thread-self/cwd", "/proc/thread-self"},
	}
	for _, tc := range tests {
		o, err := Open(tc.path)
		if tc.at == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
				continue
			}
			o.Close()
			continue
		}
		var le *LinkError
		if !errors.As(err, &le) || le.At != tc.at {
			t.Errorf("%s: %v, want a link at %s", tc.path, err, tc.at)
			continue
		}
		if !strings.Contains(err.Error(), tc.at+" is a symbolic link") {
			t.Errorf("%s: %q does not name the link", tc.path, err)
		}
	}
	for _, p := range []string{"rel", d + "/real/../real", d + "/real/", ""} {
		if _, err := Open(p); err == nil {
			t.Errorf("%q: opened a path that is not absolute and clean", p)
		}
	}
}

func TestGuard(t *testing.T) {
	d := t.TempDir()
	state := filepath.Join(d, "home", "state")
	os.MkdirAll(filepath.Join(state, "cache"), 0o700)
	bin := filepath.Join(d, "bin")
	os.MkdirAll(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "sandbox"), []byte("#!"), 0o755)
	os.MkdirAll(filepath.Join(d, "work"), 0o755)
	g, err := NewGuard(state, filepath.Join(bin, "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		writable bool
		refused  string // "" when allowed
	}{
		{d + "/work", true, ""},
		{d + "/bin", false, ""},
		{d + "/bin", true, "contains sandbox's own binary"},
		{d + "/bin/sandbox", true, "is sandbox's own binary"},
		{d + "/bin/sandbox", false, ""},
		{state, false, "is sandbox's state directory"},
		{state + "/cache", false, "lies inside sandbox's state directory"},
		{d + "/home", false, "contains sandbox's state directory"},
		{d, true, "contains sandbox's state directory"},
		{"/", false, "contains sandbox's state directory"},
		{"/proc", false, "procfs"},
		{"/proc/sys", false, "procfs"},
		{"/sys/kernel", false, "sysfs"},
		{"/dev", false, "/dev"},
		{"/dev/null", false, "/dev"},
	}
	for _, tc := range tests {
		o, err := Open(tc.path)
		if err != nil {
			if tc.refused != "" && errors.Is(err, os.ErrNotExist) {
				continue // not on this host
			}
			t.Errorf("%s: %v", tc.path, err)
			continue
		}
		err = g.Check(o, tc.writable)
		o.Close()
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s (writable %v): %v", tc.path, tc.writable, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s (writable %v): %v, want %q", tc.path, tc.writable, err, tc.refused)
		}
		var inv interface{ Invalid() bool }
		if err != nil && (!errors.As(err, &inv) || !inv.Invalid()) {
			t.Errorf("%s: %v is not an invalid-input error", tc.path, err)
		}
	}
}

// TestGuardSurvivesJSON: the guard travels to the S1 helper as JSON and
// refuses there what it refused here.
func TestGuardSurvivesJSON(t *testing.T) {
	state := t.TempDir()
	g, err := NewGuard(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Private) != 1 || len(g.Private[0].Chain) < 2 {
		t.Fatalf("guard %+v", g)
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back Guard
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	o, err := Open(filepath.Dir(state))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if back.Check(o, false) == nil {
		t.Fatalf("the guard lost its places in JSON: %s", b)
	}
}
