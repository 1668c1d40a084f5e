package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLease: a held lease is never dead; a lease whose holder is gone
// (its descriptor closed without Close, as when a process is killed) is,
// and its names say whose they are; a lease file that never got its name
// is removed; Close leaves nothing.
func TestLease(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	live, err := d.Lease()
	if err != nil {
		t.Fatal(err)
	}
	killed, err := d.Lease()
	if err != nil {
		t.Fatal(err)
	}
	name := killed.Name("run")
	if !strings.HasPrefix(name, "run-"+killed.ID+"-") || killed.Name("run") == name {
		t.Fatalf("names %q", name)
	}
	// A lease that died before it was renamed into place.
	os.WriteFile(d.Path(leaseDir, ".new-0123456789abcdef"), nil, 0o600)
	if dead, _ := d.DeadLeases(); len(dead) != 0 {
		t.Fatalf("live leases reported dead: %v", dead)
	}
	if _, err := os.Stat(d.Path(leaseDir, ".new-0123456789abcdef")); !os.IsNotExist(err) {
		t.Error("an unnamed dead lease file is still there")
	}
	killed.f.Close() // the kernel drops the lock when its holder dies
	dead, err := d.DeadLeases()
	if err != nil || len(dead) != 1 || dead[0].ID != killed.ID || !dead[0].Owns(name) || dead[0].Owns(live.Name("run")) {
		t.Fatalf("dead %v %v", dead, err)
	}
	// While a collector holds it, another sees it as held.
	if again, _ := d.DeadLeases(); len(again) != 0 {
		t.Fatalf("a lease being collected is offered twice: %v", again)
	}
	if err := dead[0].Release(); err != nil {
		t.Fatal(err)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.Root, leaseDir)); len(ents) != 0 {
		t.Fatalf("left: %v", ents)
	}
}
