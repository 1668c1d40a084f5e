package boot_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/guestbuild"
	. "github.com/opensubstrate/sandbox/internal/vm/boot"
)

// TestBuildIsReproducible: the same kernel, agent and busybox give the
// same initramfs, byte for byte, and so the same addresses; a different
// agent gives a different initramfs address.
func TestBuildIsReproducible(t *testing.T) {
	k, err := guestbuild.VMKernel()
	if err != nil {
		t.Fatal(err)
	}
	agent, err := guestbuild.VMAgent()
	if err != nil {
		t.Fatal(err)
	}
	bb := filepath.Join(filepath.Dir(k), "busybox", "bin", "busybox")
	a, err := Build(k, agent, bb, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(k, agent, bb, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr != b.Addr || a.Manifest != b.Manifest {
		t.Fatalf("two builds differ: %s %s", a.Addr, b.Addr)
	}
	ab, _ := os.ReadFile(a.Initrd)
	bb2, _ := os.ReadFile(b.Initrd)
	if !bytes.Equal(ab, bb2) {
		t.Fatal("the initramfs bytes differ")
	}
	// The archive holds what the guest needs, in order.
	for _, name := range []string{"init", "sandbox/modules/order", "sandbox/modules/virtio_console.ko", "sandbox/modules/9p.ko", "sandbox/bin/busybox", "dev/console"} {
		if !bytes.Contains(ab, append([]byte(name), 0)) {
			t.Errorf("%s is not in the initramfs", name)
		}
	}
	other, err := guestbuild.VMInit("hang")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(k, other, bb, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.Initrd == a.Manifest.Initrd || c.Manifest.Kernel != a.Manifest.Kernel {
		t.Fatalf("another agent: initramfs %s (was %s)", c.Manifest.Initrd, a.Manifest.Initrd)
	}
}

// TestResolveOrdersDependenciesFirst: each module comes after every
// module it depends on (as .modinfo says), and a module that is not there
// is refused, naming it.
func TestResolveOrdersDependenciesFirst(t *testing.T) {
	k, err := guestbuild.VMKernel()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Glob(filepath.Join(k, "lib", "modules", "*"))
	mods, err := Resolve(root[0], Modules)
	if err != nil {
		t.Fatal(err)
	}
	at := map[string]int{}
	for i, m := range mods {
		at[strings.ReplaceAll(m.Name, "-", "_")] = i
	}
	for _, m := range mods {
		deps, _ := Depends(m.Path)
		for _, d := range deps {
			if at[d] >= at[strings.ReplaceAll(m.Name, "-", "_")] {
				t.Errorf("%s is loaded before its dependency %s", m.Name, d)
			}
		}
	}
	if _, err := Resolve(root[0], []string{"no_such_module"}); !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), "no_such_module") {
		t.Fatalf("a missing module: %v", err)
	}
}

// TestParseManifestRefuses: unknown fields, two values, a missing file
// address, a command line that does not boot the agent.
func TestParseManifestRefuses(t *testing.T) {
	k := "b3:" + strings.Repeat("1", 64)
	ok := `{"type":"sandbox.vm/1","kernel":"` + k + `","initrd":"` + k + `","release":"r","cmdline":"console=ttyS0 rdinit=/init"}`
	if _, err := ParseManifest([]byte(ok)); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"unknown field": strings.Replace(ok, `"release"`, `"extra":1,"release"`, 1),
		"two values":    ok + ok,
		"no kernel":     strings.Replace(ok, `"kernel":"`+k+`",`, "", 1),
		"wrong type":    strings.Replace(ok, "sandbox.vm/1", "sandbox.vm/2", 1),
		"other init":    strings.Replace(ok, "rdinit=/init", "rdinit=/bin/sh", 1),
		"not JSON":      "{",
	} {
		if _, err := ParseManifest([]byte(in)); !errors.Is(err, ErrImage) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzParseManifest: a manifest from a unit is untrusted; parsing never
// panics, and what it accepts names both files and boots /init.
func FuzzParseManifest(f *testing.F) {
	k := "b3:" + strings.Repeat("1", 64)
	f.Add([]byte(`{"type":"sandbox.vm/1","kernel":"` + k + `","initrd":"` + k + `","release":"r","cmdline":"rdinit=/init"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		if m.Kernel.IsZero() || m.Initrd.IsZero() || !strings.Contains(" "+m.Cmdline+" ", " rdinit=/init ") {
			t.Fatalf("accepted %+v", m)
		}
	})
}
