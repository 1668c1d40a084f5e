package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/image/imagetest"
	"github.com/opensubstrate/sandbox/reject"
)

// TestImportLayoutAndDockerArchive imports the same image written by
// go-containerregistry as an OCI layout, a tar of that layout, a docker
// save archive and a gzipped one: each gives the same ID and the same
// root filesystem, with the layers applied as the OCI spec says.
func TestImportLayoutAndDockerArchive(t *testing.T) {
	img := imagetest.Image(t)
	dir := t.TempDir()
	lay := imagetest.Layout(t, img, filepath.Join(dir, "layout"))
	arch := imagetest.DockerArchive(t, img, filepath.Join(dir, "image.tar"))
	layTar := filepath.Join(dir, "layout.tar")
	if out, err := exec.Command("tar", "-C", lay, "-cf", layTar, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	gz := filepath.Join(dir, "image.tar.gz")
	gzipFile(t, arch, gz)
	id, _ := img.ConfigName()
	mdig, _ := img.Digest()

	s := image.Store{Dir: filepath.Join(dir, "store")}
	var root string
	for _, src := range []string{lay, layTar, arch, gz} {
		got, err := s.Import(src)
		if err != nil {
			t.Fatalf("import %s: %v", src, err)
		}
		if len(got) != 1 || got[0].ID != id.String() {
			t.Fatalf("import %s: %+v, want one image %s", src, got, id)
		}
		if root == "" {
			root = got[0].Root.String()
		} else if got[0].Root.String() != root {
			t.Fatalf("%s: root %s, want %s (the same files)", src, got[0].Root, root)
		}
		if strings.HasPrefix(filepath.Base(src), "layout") && got[0].Manifest != mdig.String() {
			t.Fatalf("manifest digest %q, want %s", got[0].Manifest, mdig)
		}
	}
	all, err := s.List()
	if err != nil || len(all) != 1 {
		t.Fatalf("list: %v %+v", err, all)
	}
	if all[0].Stats.Special != 1 || all[0].Stats.SetID != 1 {
		t.Fatalf("left out %+v, want the fifo and one setuid bit", all[0].Stats)
	}
	for _, ref := range []string{imagetest.Name, id.String(), id.Hex[:8], mdig.String(), "whatever@" + id.String()} {
		if r, err := s.Resolve(ref); err != nil || r.ID != id.String() {
			t.Fatalf("resolve %q: %v %s", ref, err, r.ID)
		}
	}
	rd, err := s.RootDir(all[0].Root)
	if err != nil {
		t.Fatal(err)
	}
	// The layers, applied.
	if b, _ := os.ReadFile(filepath.Join(rd, "etc/os-release")); string(b) != imagetest.OSRelease {
		t.Fatalf("os-release %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(rd, "etc/motd.link")); string(b) != "layer two\n" {
		t.Fatalf("hard link %q", b)
	}
	if _, err := os.Lstat(filepath.Join(rd, "usr/share/doc")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("usr/share/doc survived its whiteout: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(rd, "etc/fifo")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the fifo was made: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(rd, "usr/local/bin/suid-true")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Fatalf("suid-true: %v %v", err, fi)
	}
	if _, err := os.Stat(filepath.Join(rd, "bin/dash")); err != nil {
		t.Fatalf("bin/dash: %v", err)
	}
	if err := s.Verify(all[0]); err != nil {
		t.Fatal(err)
	}
	// A changed file no longer verifies.
	if err := os.WriteFile(filepath.Join(rd, "etc/motd"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(all[0]); reject.CodeOf(err) != reject.Address {
		t.Fatalf("verify after a change: %v", err)
	}
	if _, err := s.Remove(imagetest.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rd); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("root kept after remove: %v", err)
	}
	if _, err := s.Resolve(imagetest.Name); errs.Of(err) != errs.NotFound {
		t.Fatalf("resolve after remove: %v", err)
	}
}

func gzipFile(t *testing.T, src, dst string) {
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// layerImage is an image of one layer with the given entries.
func layerImage(t *testing.T, ents ...tar.Header) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range ents {
		data := []byte{}
		if h.Typeflag == tar.TypeReg {
			data = []byte("x")
			h.Size = 1
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	l := imagetest.Layer(t, buf.Bytes())
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestHostileLayers: entries that would write outside the root, through
// a planted symlink or a hard link out, are refused (nothing kept) or,
// where the path resolves inside the root as the image's programs would
// see it, kept inside it; the host file the entry aimed at is untouched
// and nothing is made outside.
func TestHostileLayers(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(outside, []byte("host"), 0o644)
	contained := map[string]bool{"whiteout-via-link": true}
	cases := map[string][]tar.Header{
		"dotdot":              {{Name: "../../" + strings.TrimPrefix(outside, "/"), Typeflag: tar.TypeReg, Mode: 0o644}},
		"through-symlink":     {{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(outside)}, {Name: "esc/victim", Typeflag: tar.TypeReg, Mode: 0o644}},
		"through-relative":    {{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "a/up", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../../" + strings.TrimPrefix(filepath.Dir(outside), "/")}, {Name: "a/up/victim", Typeflag: tar.TypeReg, Mode: 0o644}},
		"hardlink-out":        {{Name: "h", Typeflag: tar.TypeLink, Linkname: outside}},
		"hardlink-dotdot":     {{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}},
		"whiteout-dotdot":     {{Name: "../.wh.victim", Typeflag: tar.TypeReg}},
		"whiteout-via-link":   {{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(outside)}, {Name: "esc/.wh.victim", Typeflag: tar.TypeReg}},
		"hardlink-to-link":    {{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "esc"}},
		"dir-through-symlink": {{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(outside)}, {Name: "esc/newdir/", Typeflag: tar.TypeDir, Mode: 0o755}},
	}
	for name, ents := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lay := imagetest.Layout(t, layerImage(t, ents...), filepath.Join(dir, "layout"))
			s := image.Store{Dir: filepath.Join(dir, "store")}
			_, err := s.Import(lay)
			if b, _ := os.ReadFile(outside); string(b) != "host" {
				t.Fatalf("the host file is now %q", b)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "newdir")); err == nil {
				t.Fatal("a directory was made outside the root")
			}
			if contained[name] {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("imported")
			}
			if errs.Of(err) != errs.Integrity {
				t.Fatalf("category %v: %v", errs.Of(err), err)
			}
			if all, _ := s.List(); len(all) != 0 {
				t.Fatalf("kept %+v", all)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir, "roots")); len(ents) != 0 {
				t.Fatalf("roots left: %v", ents)
			}
			t.Log(err)
		})
	}
}

// TestTamperedObjects: a changed byte in any object — the manifest, the
// config, a layer's bytes — fails the import with an address error
// naming it.
func TestTamperedObjects(t *testing.T) {
	img := layerImage(t, tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644})
	mdig, _ := img.Digest()
	cdig, _ := img.ConfigName()
	layers, _ := img.Layers()
	ldig, _ := layers[0].Digest()
	for what, d := range map[string]v1.Hash{"manifest": mdig, "config": cdig, "layer": ldig} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			lay := imagetest.Layout(t, img, filepath.Join(dir, "layout"))
			blob := filepath.Join(lay, "blobs", d.Algorithm, d.Hex)
			b, err := os.ReadFile(blob)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 1
			os.WriteFile(blob, b, 0o644)
			_, err = (image.Store{Dir: filepath.Join(dir, "store")}).Import(lay)
			if reject.CodeOf(err) != reject.Address {
				t.Fatalf("%s changed: %v", what, err)
			}
			t.Log(err)
		})
	}
	// A docker save archive names no layer digest: its config's diff_ids
	// are checked against each layer's tar stream.
	t.Run("docker-layer", func(t *testing.T) {
		dir := t.TempDir()
		arch := imagetest.DockerArchive(t, img, filepath.Join(dir, "image.tar"))
		out := filepath.Join(dir, "tampered.tar")
		rewriteTar(t, arch, out, func(h *tar.Header, b []byte) []byte {
			if strings.HasSuffix(h.Name, ".tar.gz") {
				var buf bytes.Buffer
				zw := gzip.NewWriter(&buf)
				tw := tar.NewWriter(zw)
				tw.WriteHeader(&tar.Header{Name: "other", Typeflag: tar.TypeReg, Mode: 0o644})
				tw.Close()
				zw.Close()
				return buf.Bytes()
			}
			return b
		})
		_, err := (image.Store{Dir: filepath.Join(dir, "store")}).Import(out)
		if reject.CodeOf(err) != reject.Address || !strings.Contains(err.Error(), "diff_id") {
			t.Fatalf("tampered layer: %v", err)
		}
	})
}

func rewriteTar(t *testing.T, src, dst string, f func(*tar.Header, []byte) []byte) {
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, _ := os.Create(dst)
	defer out.Close()
	tr := tar.NewReader(in)
	tw := tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var buf bytes.Buffer
		buf.ReadFrom(tr)
		b := f(h, buf.Bytes())
		h.Size = int64(len(b))
		tw.WriteHeader(h)
		tw.Write(b)
	}
	tw.Close()
}

// TestNotAnImage names what is missing.
func TestNotAnImage(t *testing.T) {
	dir := t.TempDir()
	s := image.Store{Dir: filepath.Join(dir, "store")}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	_, err := s.Import(empty)
	if reject.CodeOf(err) != reject.Unrecognised {
		t.Fatalf("empty dir: %v", err)
	}
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a tar at all, but long enough to be read as a header block"), 0o644)
	if _, err := s.Import(junk); err == nil {
		t.Fatal("junk imported")
	}
	bad := filepath.Join(dir, "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(bad, "index.json"), []byte(`{"manifests":[{"digest":"sha256:zz"}]}`), 0o644)
	if _, err := s.Import(bad); reject.CodeOf(err) != reject.Invalid || !strings.Contains(err.Error(), "manifests[0]") {
		t.Fatalf("bad digest: %v", err)
	}
	var m map[string]any
	json.Unmarshal([]byte(`{}`), &m)
}

// TestTagMoves: importing another image under a name takes the name.
func TestTagMoves(t *testing.T) {
	dir := t.TempDir()
	s := image.Store{Dir: filepath.Join(dir, "store")}
	a := imagetest.Layout(t, layerImage(t, tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644}), filepath.Join(dir, "a"))
	b := imagetest.Layout(t, layerImage(t, tar.Header{Name: "b", Typeflag: tar.TypeReg, Mode: 0o644}), filepath.Join(dir, "b"))
	ia, err := s.Import(a, "mine:1")
	if err != nil {
		t.Fatal(err)
	}
	ib, err := s.Import(b, "mine:1")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Resolve("mine:1"); r.ID != ib[0].ID {
		t.Fatalf("mine:1 is %s, want %s", r.ID, ib[0].ID)
	}
	// Both were saved as imagetest.Name: b took that name too.
	if r, _ := s.Resolve(ia[0].ID); len(r.Names) != 0 {
		t.Fatalf("a's names %v, want none", r.Names)
	}
	if r, _ := s.Resolve(ib[0].ID); strings.Join(r.Names, ",") != "mine:1,"+imagetest.Name {
		t.Fatalf("b's names %v", r.Names)
	}
}

// TestImportLimits: a layer that unpacks past the byte limit (a bomb: a
// few KiB of gzip) is refused as a limit, naming it, and nothing kept.
func TestImportLimits(t *testing.T) {
	old := image.MaxImageBytes
	image.MaxImageBytes = 1 << 20
	t.Cleanup(func() { image.MaxImageBytes = old })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4 << 20})
	tw.Write(make([]byte, 4<<20))
	tw.Close()
	l := imagetest.Layer(t, buf.Bytes())
	img, _ := mutate.AppendLayers(empty.Image, l)
	dir := t.TempDir()
	lay := imagetest.Layout(t, img, filepath.Join(dir, "layout"))
	s := image.Store{Dir: filepath.Join(dir, "store")}
	_, err := s.Import(lay)
	if errs.Of(err) != errs.Limit || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("a bomb: %v (%v)", err, errs.Of(err))
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir, "roots")); len(ents) != 0 {
		t.Fatalf("kept: %v", ents)
	}
}

// TestSymlinkParentsResolveInTheRoot: an entry under a directory that an
// earlier entry made a symlink (absolute, as Debian's /var/run -> /run,
// or relative) lands where the image's own programs will find it: the
// link followed inside the root, never on the host.
func TestSymlinkParentsResolveInTheRoot(t *testing.T) {
	img := layerImage(t,
		tar.Header{Name: "run/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "var/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "var/run", Typeflag: tar.TypeSymlink, Linkname: "/run"},
		tar.Header{Name: "usr/lib/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "lib", Typeflag: tar.TypeSymlink, Linkname: "usr/lib"},
		tar.Header{Name: "var/run/pid", Typeflag: tar.TypeReg, Mode: 0o644},
		tar.Header{Name: "lib/libx.so", Typeflag: tar.TypeReg, Mode: 0o644},
		tar.Header{Name: "var/run/sub/", Typeflag: tar.TypeDir, Mode: 0o700},
		tar.Header{Name: "lib/hard", Typeflag: tar.TypeLink, Linkname: "var/run/pid"},
	)
	dir := t.TempDir()
	lay := imagetest.Layout(t, img, filepath.Join(dir, "layout"))
	s := image.Store{Dir: filepath.Join(dir, "store")}
	got, err := s.Import(lay)
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := s.RootDir(got[0].Root)
	for _, p := range []string{"run/pid", "usr/lib/libx.so", "usr/lib/hard"} {
		if fi, err := os.Lstat(filepath.Join(rd, p)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(rd, "run/sub")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("run/sub: %v %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(rd, "var/run")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("var/run is no longer the link: %v", err)
	}
	if _, err := os.Stat("/run/pid"); err == nil {
		t.Fatal("written on the host")
	}
}
