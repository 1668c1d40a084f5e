//go:build linux

package grant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// TestReach: the one way to a grant's host object refuses a link
// anywhere on the path, a guarded place, a file, and a missing path,
// each as a StorageError naming the grant; it reaches a grant held at
// another path there; and ReachAll stops at the first refusal.
func TestReach(t *testing.T) {
	d := t.TempDir()
	state := filepath.Join(d, "state")
	os.MkdirAll(filepath.Join(state, "cache"), 0o700)
	os.MkdirAll(filepath.Join(d, "work", "sub"), 0o755)
	os.WriteFile(filepath.Join(d, "work", "file"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(d, "work"), filepath.Join(d, "link"))
	guard, err := hostpath.NewGuard(state)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, at string
		mode     Mode
		want     string // "" when reached
	}{
		{d + "/work", "", RW, ""},
		{d + "/elsewhere", d + "/work/sub", RW, ""},
		{d + "/link", "", RO, d + "/link is a symbolic link"},
		{d + "/link/sub", "", RW, d + "/link is a symbolic link"},
		{d + "/work", d + "/link", RW, d + "/link is a symbolic link"},
		{state, "", RO, "is sandbox's state directory"},
		{state + "/cache", "", RW, "lies inside sandbox's state directory"},
		{d, "", RO, "contains sandbox's state directory"},
		{d + "/work/file", "", RO, "is not a directory"},
		{d + "/missing", "", RO, "no such file or directory"},
		{"relative", "", RO, "not an absolute, clean path"},
	}
	for _, tc := range tests {
		s := Storage{Path: tc.path, Mode: tc.mode}
		o, err := Reach(guard, s, tc.at)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s at %q: %v", tc.path, tc.at, err)
				continue
			}
			var st os.FileInfo
			st, _ = os.Stat(tc.at)
			if tc.at == "" {
				st, _ = os.Stat(tc.path)
			}
			if !o.IsDir() || st == nil {
				t.Errorf("%s: reached %+v", tc.path, o)
			}
			o.Close()
			continue
		}
		var se *StorageError
		if !errors.As(err, &se) || se.Grant != s || !se.Invalid() || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "fs:"+tc.path) {
			t.Errorf("%s at %q: %v, want a StorageError saying %q", tc.path, tc.at, err, tc.want)
		}
	}
	err = ReachAll(guard, []Storage{{Path: d + "/work", Mode: RW}, {Path: d + "/link", Mode: RO}, {Path: state, Mode: RO}}, nil)
	if err == nil || !strings.Contains(err.Error(), d+"/link is a symbolic link") {
		t.Fatalf("ReachAll: %v", err)
	}
	if err := ReachAll(guard, []Storage{{Path: d + "/gone", Mode: RW}}, map[string]string{d + "/gone": d + "/work"}); err != nil {
		t.Fatalf("ReachAll with a remap: %v", err)
	}
}
