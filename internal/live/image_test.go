package live

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	images "github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/image/imagetest"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// withImages gives h an image store with the test image imported.
func withImages(t *testing.T, h *Manager) images.Image {
	t.Helper()
	h.Images = images.Store{Dir: filepath.Join(h.Store.Dir.Root, "images")}
	lay := imagetest.Layout(t, imagetest.Image(t), filepath.Join(t.TempDir(), "layout"))
	got, err := h.Images.Import(lay)
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// runIn runs a shell command in the image ref's root filesystem.
func runIn(t *testing.T, h *Manager, ref, script string) (*host.Run, string, string) {
	t.Helper()
	req, err := h.CommandIn(ref, host.CommandLine{Args: []string{"sh", "-c", script}, Grants: grants(t), Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	r, err := h.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return r, out.String(), errb.String()
}

// TestRunInImageRoot: a native run in an image's root filesystem sees
// the image's files, not the host's, cannot write them, and its sealed
// unit binds the root by address; the probe held inside that root.
func TestRunInImageRoot(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	r, out, errb := runIn(t, h, imagetest.Name, `cat /etc/os-release; echo "$IMAGE"; test -e /etc/debian_version && echo HOST; touch /usr/x 2>/dev/null && echo WROTE; ls /usr/local/bin`)
	want := imagetest.OSRelease + "sandbox-test\nsuid-true\n"
	if out != want {
		t.Fatalf("stdout %q (stderr %q), want %q", out, errb, want)
	}
	ub, err := os.ReadFile(filepath.Join(r.Dir, "unit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var u unit.Unit
	if err := jcs.Unmarshal(ub, &u); err != nil {
		t.Fatal(err)
	}
	if u.Root != img.Root {
		t.Fatalf("the unit's root is %s, want %s", u.Root, img.Root)
	}
	if err := hosttest.Verify(t, h.Key.Public(), r.Dir); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var n *native.Executor
	for _, e := range h.Executors {
		if x, ok := e.(*native.Executor); ok {
			n = x
		}
	}
	d, _ := h.Images.RootDir(img.Root)
	p := n.ProbeRoot(context.Background(), d)
	if !p.Available || len(p.Layers) == 0 {
		t.Fatalf("probe in the image root: %+v", p)
	}
	// A program only the host has is not found; nor is one under the
	// run's own /proc.
	for _, args := range [][]string{{"go", "version"}, {"/proc/self/exe"}} {
		_, err := h.CommandIn(imagetest.Name, host.CommandLine{Args: args, Grants: grants(t), Cwd: "/"})
		if errs.Of(err) != errs.Invalid && errs.Of(err) != errs.NotFound {
			t.Fatalf("%v: %v (%v)", args, err, errs.Of(err))
		}
	}
	// Gone from the store: refused by name, not run on the host.
	if _, err := h.Images.Remove(imagetest.Name); err != nil {
		t.Fatal(err)
	}
	req := host.Request{Kind: tier.Native, Image: []byte("x"), Entry: "/bin/sh", Args: []string{"sh"}, Grants: grants(t), Root: img.Root}
	if _, err := h.Run(context.Background(), req); errs.Of(err) != errs.NotFound {
		t.Fatalf("a run in a removed root: %v", err)
	}
}

// TestImageLinksResolveInTheRun: an image whose top-level entries are
// symlinks to host paths (/root, /etc/shadow's directory) gets them as
// symlinks in the run's own root, resolved there: the host's files are
// not bound, and the run sees nothing of them.
func TestImageLinksResolveInTheRun(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	base := withImages(t, h)
	secret := filepath.Join(t.TempDir(), "secret")
	os.MkdirAll(secret, 0o755)
	os.WriteFile(filepath.Join(secret, "key"), []byte("host secret"), 0o644)
	// The test image's files, then a layer with top-level links out.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []tar.Header{
		{Name: "opt", Typeflag: tar.TypeSymlink, Linkname: secret},
		{Name: "srv", Typeflag: tar.TypeSymlink, Linkname: "../../../../" + strings.TrimPrefix(secret, "/")},
	} {
		tw.WriteHeader(&h)
	}
	tw.Close()
	top := imagetest.Layer(t, buf.Bytes())
	layers, _ := imagetest.Image(t).Layers()
	img, err := mutate.AppendLayers(empty.Image, append(layers, top)...)
	if err != nil {
		t.Fatal(err)
	}
	lay := imagetest.Layout(t, img, filepath.Join(t.TempDir(), "links"))
	got, err := h.Images.Import(lay, "links:1")
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Root == base.Root {
		t.Fatal("same root")
	}
	_, out, _ := runIn(t, h, "links:1", `cat /opt/key /srv/key 2>&1; readlink /opt`)
	if strings.Contains(out, "host secret") {
		t.Fatalf("the run read the host's file through the image's link: %q", out)
	}
	if !strings.Contains(out, secret) {
		t.Fatalf("the link is not there as a link: %q", out)
	}
}

// TestExecControlInImageRoot: exec control judges the image's files: the
// image's shell, allowed by address, runs (with the image's loader as
// its interpreter); the image's ls, not allowed, is refused.
func TestExecControlInImageRoot(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	d, _ := h.Images.RootDir(img.Root)
	f, err := images.Open(d, "/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sh, err := addr.OfReader(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	req, err := h.CommandIn(imagetest.Name, host.CommandLine{Args: []string{"sh", "-c", "echo in; ls / >/dev/null || echo refused"}, Grants: grants(t, "exec:allow:"+sh.String()), Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	r, err := h.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "in\nrefused\n" || r.Denied == 0 {
		t.Fatalf("stdout %q stderr %q denied %d", out.String(), errb.String(), r.Denied)
	}
}

// TestImageCheckedBeforeItIsLookedInto: to a caller whose policy does
// not list an image, the image is not there: asked for by name, by ID or
// by a prefix of its ID, with a program it has or one it has not, the
// answer is the one a name no image has gets, so that neither what it
// holds, nor that it exists, nor its ID is the caller's to learn; the
// operator's log has the refusal. Creating a sandbox in it is the same.
func TestImageCheckedBeforeItIsLookedInto(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	other := authority.Default()
	other.Images = []string{addr.Of([]byte("another image")).String()}
	mine := authority.Default()
	mine.Images = []string{img.Root.String()}
	h.Policies = map[string]authority.Policy{"mallory": other, "alice": mine}
	ctx := context.Background()
	line := func(owner string, args ...string) host.CommandLine {
		return host.CommandLine{Args: args, Cwd: "/", Grants: grants(t), Read: h.Reader(ctx, owner, "run"), Look: h.Looker(ctx, owner, "run"), Image: h.ImageChecker(ctx, owner, "run")}
	}
	hidden := func(what string, err error) string {
		t.Helper()
		var nf *images.NotFoundError
		if !errors.As(err, &nf) || !nf.Among || errors.As(err, new(*authority.DeniedError)) {
			t.Fatalf("%s: %v, want it not found among the caller's images", what, err)
		}
		if strings.Contains(err.Error(), img.Root.String()) || strings.Contains(err.Error(), img.Root.Short()) {
			t.Fatalf("%s: the answer names the image's root: %v", what, err)
		}
		return strings.ReplaceAll(err.Error(), nf.Ref, "REF")
	}
	nothing := hidden("a name no image has", func() error {
		_, err := h.CommandIn("no-such-image:1", line("mallory", "/bin/sh"))
		return err
	}())
	refused := func() int {
		ds, _, _ := authority.ReadLog(h.Store.Path(host.AuthorityLog))
		return len(ds)
	}
	before := refused()
	id := strings.TrimPrefix(img.ID, "sha256:")
	for _, ref := range []string{imagetest.Name, img.ID, id[:4], id[:12]} {
		for _, args := range [][]string{{"/bin/sh"}, {"/no/such/program"}, {"sh"}, {"no-such-command"}} {
			_, err := h.CommandIn(ref, line("mallory", args...))
			if got := hidden(fmt.Sprint(ref, args), err); got != nothing {
				t.Fatalf("%s %v: the answer differs from a missing image's, so it tells the image is there:\n%s\n%s", ref, args, got, nothing)
			}
		}
	}
	if after := refused(); after != before+16 {
		t.Errorf("the operator's log took %d refusals, want 16", after-before)
	}
	_, err := h.Create(ctx, SandboxSpec{Owner: "mallory", Image: imagetest.Name, Grants: grants(t)})
	hidden("a sandbox in it", err)
	if _, err := h.Create(ctx, SandboxSpec{Owner: "mallory", Image: "no-such-image:1", Grants: grants(t)}); hidden("a sandbox in no image", err) != nothing {
		t.Fatalf("creating a sandbox in a missing image: %v", err)
	}
	// Its own image is looked into as before.
	if req, err := h.CommandIn(imagetest.Name, line("alice", "/bin/sh")); err != nil || req.Root != img.Root {
		t.Fatalf("alice, in her image: %+v %v", req.Root, err)
	}
	var pe *host.ProgramError
	if _, err := h.CommandIn(imagetest.Name, line("alice", "/no/such/program")); !errors.As(err, &pe) || !pe.NotFound {
		t.Fatalf("alice, a program her image has not: %v, want it not found", err)
	}
}

// TestResumeCheckedBeforeItsRootIsLookedFor: a suspended sandbox whose
// root filesystem its owner's policy no longer lists is refused by the
// images rule, whether this host still holds that root or not: who may
// not resume it does not learn which roots the host holds.
func TestResumeCheckedBeforeItsRootIsLookedFor(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	p := authority.Default()
	p.Images = []string{img.Root.String()}
	h.Policies = map[string]authority.Policy{"alice": p}
	ctx := context.Background()
	info, err := h.Create(ctx, SandboxSpec{Owner: "alice", Image: imagetest.Name, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Suspend(ctx, info.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	p.Images = []string{addr.Of([]byte("another image")).String()}
	h.Policies = map[string]authority.Policy{"alice": p}
	refusal := func(what string) string {
		t.Helper()
		_, err := h.Resume(ctx, info.ID, "alice")
		var de *authority.DeniedError
		if !errors.As(err, &de) || de.Rule != "images" {
			t.Fatalf("%s: %v, want the images rule's refusal", what, err)
		}
		return err.Error()
	}
	held := refusal("its root still on this host")
	if _, err := h.Images.Remove(imagetest.Name); err != nil {
		t.Fatal(err)
	}
	if gone := refusal("its root gone from this host"); gone != held {
		t.Fatalf("the answers differ, so they tell whether the host holds the root:\n%s\n%s", held, gone)
	}
}

// TestAHiddenAmbiguousImageIsLogged: a prefix that names two images the
// caller may use neither of is, to it, no image; the operator's log has
// the refusal of each.
func TestAHiddenAmbiguousImageIsLogged(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	img := withImages(t, h)
	// A second record whose ID shares the first's first 12 hex digits.
	b, err := os.ReadFile(filepath.Join(h.Images.Dir, "images", strings.TrimPrefix(img.ID, "sha256:")+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var twin images.Image
	if err := json.Unmarshal(b, &twin); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimPrefix(img.ID, "sha256:")
	twin.ID = "sha256:" + id[:12] + strings.Repeat("0", len(id)-12)
	if twin.ID == img.ID {
		twin.ID = "sha256:" + id[:12] + strings.Repeat("1", len(id)-12)
	}
	twin.Names, twin.Root = nil, addr.Of([]byte("the twin's root"))
	if b, err = json.Marshal(twin); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.Images.Dir, "images", strings.TrimPrefix(twin.ID, "sha256:")+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := authority.Default()
	p.Images = []string{addr.Of([]byte("another image")).String()}
	h.Policies = map[string]authority.Policy{"mallory": p}
	logged := func() []authority.Decision {
		ds, _, _ := authority.ReadLog(h.Store.Path(host.AuthorityLog))
		return ds
	}
	before := len(logged())
	var nf *images.NotFoundError
	if _, err := h.ResolveImage(id[:8], h.ImageChecker(context.Background(), "mallory", "run")); !errors.As(err, &nf) || !nf.Among {
		t.Fatalf("a prefix of two images mallory may not use: %v, want it not found among its images", err)
	}
	ds := logged()[before:]
	seen := map[string]bool{}
	for _, d := range ds {
		seen[d.Grant] = true
	}
	if len(ds) != 2 || !seen["image:"+img.Root.String()] || !seen["image:"+twin.Root.String()] {
		t.Fatalf("the operator's log took %+v, want the refusal of each image", ds)
	}
}
