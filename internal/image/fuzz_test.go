package image_test

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/image/imagetest"
)

// FuzzImport imports arbitrary bytes as an image archive: an error or an
// image, never a panic, never a file outside the store, and on an error
// nothing kept.
func FuzzImport(f *testing.F) {
	img := layerImage(&testing.T{}, tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644}, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f"})
	dir := f.TempDir()
	for _, p := range []string{
		imagetest.DockerArchive(f, img, filepath.Join(dir, "docker.tar")),
	} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	// A sparse entry or a compressed layer expands to its declared size:
	// a bomb is bounded by the limit, kept small here.
	image.MaxImageBytes = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.tar")
		if err := os.WriteFile(src, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := image.Store{Dir: filepath.Join(dir, "store")}
		got, err := s.Import(src)
		if err != nil {
			if ents, _ := os.ReadDir(filepath.Join(s.Dir, "roots")); len(ents) != 0 {
				t.Fatalf("failed import kept %v", ents)
			}
			return
		}
		for _, img := range got {
			if err := s.Verify(img); err != nil {
				t.Fatal(err)
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 2 {
			t.Fatalf("import wrote beside the store: %v", ents)
		}
	})
}
