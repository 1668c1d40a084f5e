package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/wasm"
	"github.com/opensubstrate/sandbox/tier"
)

// runFS runs the fsops guest at S2 with grants and returns its output,
// after checking the run was sealed, verifies and replays identically.
func runFS(t *testing.T, h *Host, grantArgs []string, ops ...string) string {
	t.Helper()
	var out bytes.Buffer
	r, err := h.Run(context.Background(), Request{
		Kind: tier.Wasm, Image: image(t, "fsops"), Entry: "fsops", Args: append([]string{"fsops"}, ops...),
		Grants: grants(t, grantArgs...), Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatalf("the run does not verify: %v", err)
	}
	rep, err := h.Replay(context.Background(), r.Dir, nil, nil)
	if err != nil || !rep.Matches() {
		t.Fatalf("the run does not replay: %v %+v", err, rep)
	}
	return out.String()
}

// TestS2NestedGrantHoldsUnderRename: a read-only grant nested in a
// read-write one stays read-only after the guest renames the directory
// above it, through every path that now names it; the run is sealed,
// verifies and replays, refusals logged.
func TestS2NestedGrantHoldsUnderRename(t *testing.T) {
	h := newHost(t)
	g := t.TempDir()
	ro := filepath.Join(g, "a", "ro")
	os.MkdirAll(ro, 0o755)
	os.WriteFile(filepath.Join(ro, "file"), []byte("orig"), 0o644)
	moved := filepath.Join(g, "b", "ro")
	out := runFS(t, h, []string{"fs:" + g + ":rw", "fs:" + ro + ":ro"},
		"rename", filepath.Join(g, "a"), filepath.Join(g, "b"),
		"write", filepath.Join(moved, "file"), "PWNED",
		"append", filepath.Join(moved, "file"), "PWNED",
		"write", filepath.Join(moved, "new"), "x",
		"mkdir", filepath.Join(moved, "d"),
		"truncate", filepath.Join(moved, "file"), "0",
		"chmod", moved, "777",
		"rename", moved, filepath.Join(g, "c"),
		"unlink", filepath.Join(moved, "file"),
		"symlink", "b/ro/file", filepath.Join(g, "link"),
		"write", filepath.Join(g, "link"), "PWNED",
		"symlink", "b/ro/dangling", filepath.Join(g, "dl"),
		"write", filepath.Join(g, "dl"), "PWNED",
		"read", filepath.Join(ro, "file"),
		"write", filepath.Join(g, "b", "ok"), "fine",
	)
	t.Logf("\n%s", out)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		last := strings.HasPrefix(l, "read ") || strings.HasPrefix(l, "write "+filepath.Join(g, "b", "ok")) ||
			strings.HasPrefix(l, "rename "+filepath.Join(g, "a")) || strings.HasPrefix(l, "symlink ")
		if last != strings.Contains(l, ": ok") {
			t.Errorf("%s", l)
		}
	}
	if b, err := os.ReadFile(filepath.Join(moved, "file")); err != nil || string(b) != "orig" {
		t.Errorf("the read-only file is now %q (%v)", b, err)
	}
	for _, p := range []string{filepath.Join(moved, "new"), filepath.Join(moved, "d"), filepath.Join(g, "c"), filepath.Join(moved, "dangling")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made inside the read-only grant", p)
		}
	}
	if fi, _ := os.Stat(moved); fi.Mode().Perm() != 0o755 {
		t.Errorf("the read-only grant's root is now %v", fi.Mode())
	}
}

// TestS2GrantPathsFollowNoLink: at S2, as at S1, a grant whose path is or
// passes through a symbolic link is refused, naming the link, and so is
// a grant that reaches the state directory or a kernel interface.
func TestS2GrantPathsFollowNoLink(t *testing.T) {
	h := newHost(t)
	d := t.TempDir()
	os.MkdirAll(filepath.Join(d, "real"), 0o755)
	os.Symlink("real", filepath.Join(d, "link"))
	os.Symlink("/etc", filepath.Join(d, "real", "etc"))
	tests := []struct {
		grant, want string
	}{
		{"fs:" + d + "/link:rw", d + "/link is a symbolic link"},
		{"fs:" + d + "/link/x:ro", d + "/link is a symbolic link"},
		{"fs:" + d + "/real/etc:ro", d + "/real/etc is a symbolic link (to /etc)"},
		{"fs:" + h.Store.Dir.Root + ":ro", "is sandbox's state directory"},
		{"fs:" + h.Store.Dir.Path("cache") + ":rw", "lies inside sandbox's state directory"},
		{"fs:" + filepath.Dir(h.Store.Dir.Root) + ":ro", "contains sandbox's state directory"},
		{"fs:/proc/self:ro", "is a symbolic link"},
		{"fs:/proc/sys:ro", "procfs"},
	}
	for _, tc := range tests {
		_, err := h.Run(context.Background(), Request{
			Kind: tier.Wasm, Image: image(t, "fsops"), Entry: "fsops", Args: []string{"fsops"}, Grants: grants(t, tc.grant),
		})
		var inv interface{ Invalid() bool }
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &inv) {
			t.Errorf("%s: %v, want an invalid-grant error saying %q", tc.grant, err, tc.want)
		}
		var le *hostpath.LinkError
		if strings.Contains(tc.want, "symbolic link") && !errors.As(err, &le) {
			t.Errorf("%s: %v is not a LinkError", tc.grant, err)
		}
	}
	runs, _ := h.Runs()
	if len(runs) != 0 {
		t.Errorf("%d runs were sealed for refused grants", len(runs))
	}
}

// TestCacheRewriteSealedRun: after a cached module was rewritten (as a
// guest that reached the state directory would), the next sealed run
// runs the right code, says so, and its records verify.
func TestCacheRewriteSealedRun(t *testing.T) {
	h := newHost(t)
	var warned []string
	w, err := wasm.New(wasm.Config{CacheDir: h.Store.Dir.Path("cache"), CacheKey: h.Key.Derive(wasm.CacheKeyContext), StateDir: h.Store.Dir.Root,
		MemoryLimitPages: 1024, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	h.Executors = []executor.Executor{w}
	hello, cat := image(t, "hello"), image(t, "cat")
	run := func(img []byte, args ...string) (*Run, string) {
		var out bytes.Buffer
		r, err := h.Run(context.Background(), Request{Kind: tier.Wasm, Image: img, Entry: args[0], Args: args, Grants: grants(t), Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		return r, out.String()
	}
	run(hello, "hello", "x")
	run(cat, "cat")
	inst := func(img []byte) string {
		m, _ := filepath.Glob(filepath.Join(h.Store.Dir.Path("cache"), "instrumented", "*-"+addr.Of(img).Hex()+".wasm"))
		if len(m) != 1 {
			t.Fatalf("instrumented cache: %v", m)
		}
		return m[0]
	}
	b, _ := os.ReadFile(inst(cat))
	os.WriteFile(inst(hello), b, 0o600)
	w.Close()
	// The next process.
	w, err = wasm.New(wasm.Config{CacheDir: h.Store.Dir.Path("cache"), CacheKey: h.Key.Derive(wasm.CacheKeyContext), StateDir: h.Store.Dir.Root,
		MemoryLimitPages: 1024, Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h.Executors = []executor.Executor{w}
	r, out := run(hello, "hello", "sealed")
	if out != "hello, sealed\n" {
		t.Fatalf("the rewritten cache ran other code: %q", out)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "discarded the cached instrumentation") {
		t.Fatalf("warnings: %q", warned)
	}
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatalf("the run does not verify: %v", err)
	}
}
