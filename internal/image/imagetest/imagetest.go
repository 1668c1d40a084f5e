// Package imagetest builds container images for tests, offline, from
// the Debian packages installed on this machine, with the reference
// implementation (go-containerregistry) as the writer: what package
// image reads is what the ecosystem's own code writes.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Packages are the Debian packages the test image is made of: a shell,
// the core utilities and the libraries they need (all essential or their
// dependencies, so on every Debian machine).
var Packages = []string{"dash", "coreutils", "libc6", "libacl1", "libattr1", "libgmp10", "libselinux1", "libpcre2-8-0", "libgcc-s1"}

// OSRelease is the test image's /etc/os-release: a run that reads it
// is in the image, not on the host.
const OSRelease = "ID=sandbox-test\nNAME=\"sandbox test image\"\n"

// Name is the name the test image is saved under.
const Name = "sandbox-test:1"

// Image is the test image: a base layer with the packages' files and
// /etc/os-release, and a second layer that removes /usr/share/doc (a
// whiteout), adds /etc/motd, a setuid copy of a program, a fifo and a
// hard link.
func Image(t testing.TB) v1.Image {
	t.Helper()
	base := tarLayer(t, debianEntries(t))
	top := tarLayer(t, []entry{
		{hdr: tar.Header{Name: "usr/share/.wh.doc", Typeflag: tar.TypeReg, Mode: 0o644}},
		{hdr: tar.Header{Name: "etc/motd", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte("layer two\n")},
		{hdr: tar.Header{Name: "usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "usr/local/bin/suid-true", Typeflag: tar.TypeReg, Mode: 0o4755}, data: []byte("#!/bin/sh\n")},
		{hdr: tar.Header{Name: "etc/fifo", Typeflag: tar.TypeFifo, Mode: 0o644}},
		{hdr: tar.Header{Name: "etc/motd.link", Typeflag: tar.TypeLink, Linkname: "etc/motd"}},
	})
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "IMAGE=sandbox-test"}
	cf.Config.Cmd = []string{"/bin/sh"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Layout writes img as an OCI image layout in dir, named Name.
func Layout(t testing.TB, img v1.Image, dir string) string {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": Name})); err != nil {
		t.Fatal(err)
	}
	return dir
}

// DockerArchive writes img as a docker save archive at file, tagged Name.
func DockerArchive(t testing.TB, img v1.Image, file string) string {
	t.Helper()
	tag, err := name.NewTag(Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	return file
}

type entry struct {
	hdr  tar.Header
	data []byte
	file string // read from here when data is nil
}

func tarLayer(t testing.TB, ents []entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.hdr
		var r io.Reader = bytes.NewReader(e.data)
		if e.file != "" {
			f, err := os.Open(e.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			r = f
		}
		if h.Typeflag == tar.TypeReg {
			if e.file != "" {
				fi, _ := os.Stat(e.file)
				h.Size = fi.Size()
			} else {
				h.Size = int64(len(e.data))
			}
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return Layer(t, buf.Bytes())
}

// Layer is a layer of the tar stream b, read from memory.
// (tarball.LayerFromReader would copy b to a temporary file it never
// removes.)
func Layer(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// debianEntries are the files of Packages as installed here, at their
// real paths (a merged /usr's /bin is usr/bin), with the host's
// top-level links (bin -> usr/bin) and /etc/os-release.
func debianEntries(t testing.TB) []entry {
	t.Helper()
	var out []byte
	for _, pkg := range Packages {
		b, err := exec.Command("dpkg", "-L", pkg).Output()
		if err != nil && (pkg == "dash" || pkg == "libc6") {
			t.Fatalf("dpkg -L %s: %v (the test image is built from this machine's Debian packages)", pkg, err)
		}
		out = append(out, b...)
	}
	paths := map[string]os.FileInfo{}
	for _, p := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(p, "/") || p == "/." {
			continue
		}
		real := p
		if d, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			real = filepath.Join(d, filepath.Base(p))
		}
		fi, err := os.Lstat(real)
		if err != nil {
			continue
		}
		paths[real] = fi
		for d := filepath.Dir(real); d != "/"; d = filepath.Dir(d) {
			if _, ok := paths[d]; ok {
				break
			}
			if di, err := os.Lstat(d); err == nil {
				paths[d] = di
			}
		}
	}
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	var ents []entry
	for _, top := range []string{"bin", "sbin", "lib", "lib64", "lib32", "libx32"} {
		if target, err := os.Readlink("/" + top); err == nil {
			ents = append(ents, entry{hdr: tar.Header{Name: top, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}})
		}
	}
	for _, p := range names {
		fi := paths[p]
		h := tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(fi.Mode().Perm())}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			ents = append(ents, entry{hdr: h})
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
			ents = append(ents, entry{hdr: h})
		case fi.Mode().IsRegular():
			h.Typeflag = tar.TypeReg
			ents = append(ents, entry{hdr: h, file: p})
		}
	}
	if _, ok := paths["/etc"]; !ok {
		ents = append(ents, entry{hdr: tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}})
	}
	return append(ents, entry{hdr: tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte(OSRelease)})
}
