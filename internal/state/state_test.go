package state

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opensubstrate/sandbox/key"
)

func TestDefault(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		m    map[string]string
		want string
	}{
		{map[string]string{"SANDBOX_HOME": "/s", "XDG_STATE_HOME": "/x", "HOME": "/h"}, "/s"},
		{map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/sandbox"},
		{map[string]string{"XDG_STATE_HOME": "rel", "HOME": "/h"}, "/h/.local/state/sandbox"},
		{map[string]string{"HOME": "/h"}, "/h/.local/state/sandbox"},
	}
	for _, tc := range tests {
		if got, err := Default(env(tc.m)); err != nil || got != tc.want {
			t.Errorf("Default(%v) = %q, %v; want %q", tc.m, got, err, tc.want)
		}
	}
	if _, err := Default(env(nil)); err == nil {
		t.Error("no HOME and no SANDBOX_HOME accepted")
	}
}

func TestHostKey(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	k1, err := d.HostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := d.HostKey(bytes.NewReader(nil)) // no randomness needed the second time
	if err != nil || k1.Public() != k2.Public() {
		t.Fatalf("second use: %v", err)
	}
	fi, _ := os.Stat(d.Path("host.key"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", fi.Mode())
	}
	pub, _ := os.ReadFile(d.Path("host.pub"))
	if p, err := key.ParsePublic(strings.TrimSpace(string(pub))); err != nil || p != k1.Public() {
		t.Fatalf("host.pub = %q, %v", pub, err)
	}
	os.Chmod(d.Path("host.key"), 0o644)
	if _, err := d.HostKey(rand.Reader); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key used: %v", err)
	}
}

func TestHostKeyRace(t *testing.T) {
	d, _ := Open(t.TempDir())
	var wg sync.WaitGroup
	keys := make([]key.Public, 8)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := d.HostKey(rand.Reader)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k.Public()
		}()
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] {
			t.Fatal("racing first uses made different keys")
		}
	}
}
