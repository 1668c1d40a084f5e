// Package hosttest holds what tests of hosts make again and again: a
// state directory of the test's own with its key, an S2 executor, an S1
// executor whose probe passed, grants with a CPU budget, the processes
// running a command. It imports no host (the host's own tests use it)
// and is imported by tests only.
package hosttest

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/wasm"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/verify"
)

// State is a new state directory of the test's, and its host key.
func State(t testing.TB) (*state.Dir, key.Private) {
	t.Helper()
	d, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, err := d.HostKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return d, k
}

// S2 is an S2 executor of state directory d.
func S2(t testing.TB, d *state.Dir, k key.Private) *wasm.Executor {
	t.Helper()
	w, err := wasm.New(wasm.Config{CacheDir: d.Path("cache"), CacheKey: k.Derive(wasm.CacheKeyContext), StateDir: d.Root, MemoryLimitPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// S1 is an S1 executor of state directory root whose probe passed; name
// names its temporary objects (a lease's).
func S1(t testing.TB, root string, name func(string) string) *native.Executor {
	t.Helper()
	helper, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	ex, err := native.New(native.Config{StateDir: root, Memory: 256 << 20, Pids: 64, Self: helper, TempName: name})
	if err != nil {
		t.Fatal(err)
	}
	if p := ex.Probe(context.Background()); !p.Available {
		t.Fatalf("S1 is unavailable here: %s", p.Reason)
	}
	return ex
}

// Cgroups is the machine's cgroup hierarchy, or nil.
func Cgroups() *cgroup.Hierarchy {
	cg, err := cgroup.Detect("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	return cg
}

// Grants parses command-line grants after a CPU budget of 20 J.
func Grants(t testing.TB, gs ...string) grant.Set {
	t.Helper()
	s, err := grant.ParseArgs(append([]string{"cpu:20J"}, gs...), "/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ProcessesWith lists the processes whose command line starts with s.
func ProcessesWith(t testing.TB, s string) []string {
	t.Helper()
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Verify verifies the run directory dir trusting pub, and returns the
// first failure of any of its files (nil: every file verified).
func Verify(t testing.TB, pub key.Public, dir string) error {
	t.Helper()
	for _, r := range (&verify.Verifier{Trust: key.NewTrust(pub)}).Path(dir) {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// Lease takes a lease on s's state directory for the test (released at
// its end) and gives it to s; it returns the lease's namer.
func Lease(t testing.TB, s *store.Store) func(string) string {
	t.Helper()
	lease, err := s.Dir.Lease()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	s.Lease = lease
	return lease.Name
}

// Guest is test guest name, built: hello, cat and spin are their C
// builds, which behave as the Go ones and compile in a moment in each
// test's fresh state directory (the Go builds' megabytes take seconds,
// tens of them under the race detector); the others are Go programs.
func Guest(t testing.TB, name string) []byte {
	t.Helper()
	switch name {
	case "hello", "cat", "spin":
		return guestbuild.Read(t, guestbuild.C, name)
	}
	return guestbuild.Read(t, guestbuild.Go, name)
}
