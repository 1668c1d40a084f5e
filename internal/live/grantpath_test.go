//go:build linux

package live

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/internal/bare"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/guestbuild"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/vm"
	"github.com/opensubstrate/sandbox/tier"
)

// TestEveryExecutorReachesGrantsOneWay runs, against every executor this
// host has (S0 bare, S1, S2, S5 on QEMU for native programs and for VM
// images, S5 on Firecracker through its stand-in; a tier the machine
// lacks is skipped with its probe's reason), the two-run link plant and
// the state directory's grants:
//
//   - run 1, with a read-write grant of DIR, plants DIR/link -> a host
//     directory (at the executor itself where its guest can make a host
//     link; an S5 guest cannot: its link in a read-write share is a file
//     with extended attributes on the host, which the test checks, so S1
//     plants it for S5);
//   - run 2 asks for fs:DIR/link:rw, and a live sandbox too where the
//     tier has them: refused with the link named (a *hostpath.LinkError),
//     before anything runs, nothing sealed, nothing written where the
//     link points;
//   - a grant of the state directory, of a directory containing it and
//     of one inside it: refused, naming the place, at every tier, S0
//     included (S0 confines nothing, yet what it is granted is checked
//     like every tier's: a record never says the state directory was
//     given to a run).
func TestEveryExecutorReachesGrantsOneWay(t *testing.T) {
	h := newS1Host(t) // S2 and S1
	var s1, s2 executor.Executor
	base := append([]executor.Executor{}, h.Executors...)
	for _, e := range base {
		switch e.Tier() {
		case tier.S1:
			s1 = e
		case tier.S2:
			s2 = e
		}
	}
	base = append(base, bare.Executor{})
	img, err := guestbuild.DefaultVMImage()
	if err != nil {
		t.Fatal(err)
	}
	jail, err := guestbuild.S1Helper()
	if err != nil {
		t.Fatal(err)
	}
	qemu := vm.New(vm.Config{ImageDir: img, Accel: "tcg", Jail: jail, StateDir: h.Store.Root()})
	seedS5Probe(t, h, qemu[0])
	fc, err := guestbuild.FakeFirecracker()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := filepath.Abs("../vm/firecracker/testdata/firecracker-api.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SANDBOX_FAKEFC_SCHEMA", schema)
	t.Setenv("SANDBOX_FAKEFC_LOG", filepath.Join(t.TempDir(), "requests"))
	kvm := filepath.Join(t.TempDir(), "kvm") // the stand-in's KVM: a device that opens
	os.WriteFile(kvm, nil, 0o600)
	firecracker := vm.NewFirecracker(vm.Config{ImageDir: img, KVM: kvm}, fc)
	manifest := filepath.Join(img, "manifest.json")

	state := h.Store.Dir.Root
	os.MkdirAll(filepath.Join(state, "cache"), 0o700)
	s0, s5 := tier.S0, tier.S5
	// A budget a VM's boot under TCG does not spend.
	grants := func(t *testing.T, gs ...string) grant.Set {
		s, err := grant.ParseArgs(append([]string{"cpu:5000J"}, gs...), "/")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	native := func(t *testing.T, at *tier.Tier, script string, gs ...string) host.Request {
		req, err := host.Command(host.CommandLine{Args: []string{"/bin/sh", "-c", script}, Grants: grants(t, gs...), Cwd: "/"})
		if err != nil {
			t.Fatal(err)
		}
		req.Tier = at
		return req
	}
	cases := []struct {
		name string
		ex   executor.Executor
		live tier.Tier // 0: no live sandboxes at this tier
		// req asks for a unit of the executor's that runs the shell
		// command (or fsops operations, at S2) with grants gs.
		req func(t *testing.T, script string, ops []string, gs ...string) host.Request
		// plants: its guest makes a host link; else S1 plants it.
		plants bool
	}{
		{"S0 bare", bare.Executor{}, 0, func(t *testing.T, script string, _ []string, gs ...string) host.Request {
			return native(t, &s0, script, gs...)
		}, true},
		{"S1", s1, tier.S1, func(t *testing.T, script string, _ []string, gs ...string) host.Request {
			return native(t, nil, script, gs...)
		}, true},
		{"S2", s2, tier.S2, func(t *testing.T, _ string, ops []string, gs ...string) host.Request {
			return host.Request{Kind: tier.Wasm, Image: image(t, "fsops"), Entry: "fsops", Args: append([]string{"fsops"}, ops...), Grants: grants(t, gs...)}
		}, true},
		{"S5 QEMU", qemu[0], tier.S5, func(t *testing.T, script string, _ []string, gs ...string) host.Request {
			return native(t, &s5, script, append(gs, "kernel")...)
		}, false},
		{"S5 QEMU image", qemu[1], 0, func(t *testing.T, script string, _ []string, gs ...string) host.Request {
			req, err := host.Command(host.CommandLine{Args: []string{manifest, "/sandbox/bin/sh", "-c", script}, Grants: grants(t, gs...), Cwd: "/"})
			if err != nil {
				t.Fatal(err)
			}
			return req
		}, false},
		{"S5 Firecracker", firecracker, 0, func(t *testing.T, script string, _ []string, gs ...string) host.Request {
			req, err := host.Command(host.CommandLine{Args: []string{manifest, "/sandbox/bin/sh", "-c", script}, Grants: grants(t, gs...), Cwd: "/"})
			if err != nil {
				t.Fatal(err)
			}
			return req
		}, false},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h.Executors = append([]executor.Executor{}, base...)
			if tc.ex.Tier() == tier.S5 {
				h.Executors = append(h.Executors, tc.ex)
			}
			if p := h.ProbeOf(ctx, tc.ex); !p.Available {
				t.Skipf("%s is unavailable here: %s", tc.ex.Name(), p.Reason)
			}
			dir, target := t.TempDir(), t.TempDir()
			os.Chmod(dir, 0o777)
			os.Chmod(target, 0o777)
			link := filepath.Join(dir, "link")
			runs := func() int { rs, _ := h.Runs(); return len(rs) }

			// Run 1 plants the link.
			planter := tc
			if !tc.plants {
				if tc.ex.Kind() == tier.Native {
					// An S5 guest's link in a read-write share is a file
					// on the host, not a link.
					req := tc.req(t, "ln -s "+target+" "+dir+"/own", nil, "fs:"+dir+":rw")
					var out strings.Builder
					req.Stdout, req.Stderr = &out, &out
					r, err := h.Run(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					fi, err := os.Lstat(filepath.Join(dir, "own"))
					if err != nil || fi.Mode()&os.ModeSymlink != 0 {
						t.Fatalf("the S5 guest's own link in its share (%+v, %q): %v %v", r.Result.Outcome, out.String(), fi, err)
					}
				}
				planter = cases[1] // S1
			}
			if _, err := h.Run(ctx, planter.req(t, "ln -s "+target+" "+link, []string{"symlink", target, link}, "fs:"+dir+":rw")); err != nil {
				t.Fatal(err)
			}
			if got, err := os.Readlink(link); err != nil || got != target {
				t.Fatalf("run 1 planted no link: %q %v", got, err)
			}

			// Run 2 asks for the link: refused, naming it, nothing run.
			before := runs()
			pwned := filepath.Join(link, "pwned")
			_, err := h.Run(ctx, tc.req(t, "echo PWNED > "+pwned, []string{"write", pwned, "PWNED"}, "fs:"+link+":rw"))
			linkRefused(t, "run 2", err, link)
			if tc.live != 0 {
				_, err := h.Create(ctx, SandboxSpec{Tier: tc.live, Grants: grants(t, "fs:"+link+":rw")})
				linkRefused(t, "a live sandbox", err, link)
			}
			if ents, _ := os.ReadDir(target); len(ents) != 0 {
				t.Fatalf("the link's target holds %v", ents)
			}

			// The state directory, in any mode, from any side.
			for _, g := range []struct{ grant, want string }{
				{"fs:" + state + ":ro", "is sandbox's state directory"},
				{"fs:" + filepath.Join(state, "cache") + ":rw", "lies inside sandbox's state directory"},
				{"fs:" + filepath.Dir(state) + ":ro", "contains sandbox's state directory"},
			} {
				_, err := h.Run(ctx, tc.req(t, "echo PWNED > "+state+"/pwned", []string{"write", state + "/pwned", "PWNED"}, g.grant))
				placeRefused(t, g.grant, err, g.want)
				if tc.live != 0 {
					_, err := h.Create(ctx, SandboxSpec{Tier: tc.live, Grants: grants(t, g.grant)})
					placeRefused(t, "a live sandbox with "+g.grant, err, g.want)
				}
			}
			if _, err := os.Stat(filepath.Join(state, "pwned")); err == nil {
				t.Fatal("a run wrote into the state directory")
			}
			if n := runs(); n != before {
				t.Fatalf("%d runs were sealed for refused grants", n-before)
			}
			if n := len(h.Sandboxes("")); n != 0 {
				t.Fatalf("%d sandboxes live after refusals", n)
			}
		})
	}
}

// linkRefused: err refuses a grant for the link at link, naming it, as
// invalid input.
func linkRefused(t *testing.T, what string, err error, link string) {
	t.Helper()
	var le *hostpath.LinkError
	var se *grant.StorageError
	var inv interface{ Invalid() bool }
	if !errors.As(err, &le) || !errors.As(err, &se) || !errors.As(err, &inv) || !inv.Invalid() || le.At != link ||
		!strings.Contains(err.Error(), link+" is a symbolic link") {
		t.Fatalf("%s: %v, want the link %s refused", what, err, link)
	}
}

// placeRefused: err refuses a grant that reaches a guarded place, saying
// want, as invalid input.
func placeRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	var re *hostpath.RefusedError
	var inv interface{ Invalid() bool }
	if !errors.As(err, &re) || !errors.As(err, &inv) || !inv.Invalid() || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want it refused: %q", what, err, want)
	}
}
