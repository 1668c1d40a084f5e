package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/opensubstrate/sandbox/reject"
)

// source is where an import reads its objects: a directory or a tar
// archive, addressed by slash-separated relative names.
type source interface {
	// open opens the regular file name; fs.ErrNotExist when there is none.
	open(name string) (io.ReadCloser, error)
	close() error
}

// dirSource is a directory, read through an os.Root: no name, and no
// symlink in the directory, reaches a file outside it.
type dirSource struct{ root *os.Root }

func (d dirSource) open(name string) (io.ReadCloser, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", name)
		}
		return nil, err
	}
	return f, nil
}

func (d dirSource) close() error { return d.root.Close() }

// tarSource is an uncompressed tar archive, indexed once: each regular
// file's offset and size, each symlink's target.
type tarSource struct {
	f     *os.File
	files map[string]section
	links map[string]string
}

type section struct{ off, size int64 }

// countReader counts the bytes read through it: the offset of an entry's
// data is the count after its header.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// maxArchiveEntries bounds the entries of an image archive (not of a
// layer): a docker save archive has a few per layer.
const maxArchiveEntries = 100000

func openTar(f *os.File) (*tarSource, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	cr := &countReader{r: f}
	tr := tar.NewReader(cr)
	s := &tarSource{f: f, files: map[string]section{}, links: map[string]string{}}
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, reject.Wrap(reject.Malformed, "archive", err)
		}
		if i >= maxArchiveEntries {
			return nil, reject.New(reject.Invalid, "archive", "more than %d entries", maxArchiveEntries)
		}
		name, ok := cleanName(h.Name)
		if !ok && strings.Trim(h.Name, "./") == "" {
			continue // the archive's own root
		}
		if !ok {
			return nil, reject.New(reject.Invalid, "archive", "entry %q: not a relative path inside the archive", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			s.files[name] = section{off: cr.n, size: h.Size}
		case tar.TypeSymlink:
			s.links[name] = h.Linkname
		}
	}
	return s, nil
}

func (s *tarSource) open(name string) (io.ReadCloser, error) {
	name, ok := cleanName(name)
	for hop := 0; ok && hop < 16; hop++ {
		if sec, found := s.files[name]; found {
			return io.NopCloser(io.NewSectionReader(s.f, sec.off, sec.size)), nil
		}
		t, found := s.links[name]
		if !found {
			break
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(name), t)
		}
		name, ok = cleanName(t)
	}
	return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
}

func (s *tarSource) close() error { return s.f.Close() }

// cleanName is name as a clean relative path, and whether it is one:
// leading "./" and "/" are dropped; ".." anywhere, or nothing left, is not.
func cleanName(name string) (string, bool) {
	if strings.ContainsRune(name, 0) {
		return "", false
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", false
		}
	}
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	return c, c != ""
}

// openSource opens what p names: a directory, a tar archive or a gzip-
// compressed one. A compressed archive is decompressed into tmp first
// (removed by the caller with the rest of the staging directory).
func openSource(p, tmp string) (source, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		r, err := os.OpenRoot(p)
		if err != nil {
			return nil, err
		}
		return dirSource{r}, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(f, head); err != nil {
		f.Close()
		return nil, reject.New(reject.Malformed, p, "neither a directory nor an archive (%d bytes)", fi.Size())
	}
	if bytes.Equal(head, []byte{0x1f, 0x8b}) {
		f.Seek(0, io.SeekStart)
		out, err := os.CreateTemp(tmp, "archive-*.tar")
		if err != nil {
			f.Close()
			return nil, err
		}
		zr, err := gzip.NewReader(bufio.NewReader(f))
		if err == nil {
			_, err = io.Copy(out, io.LimitReader(zr, MaxImageBytes+1))
		}
		f.Close()
		if err == nil {
			var n int64
			if n, err = out.Seek(0, io.SeekCurrent); err == nil && n > MaxImageBytes {
				err = &LimitError{What: "the decompressed archive", Max: MaxImageBytes}
			}
		}
		if err != nil {
			out.Close()
			var le *LimitError
			if errors.As(err, &le) {
				return nil, err
			}
			return nil, reject.Wrap(reject.Malformed, p, err)
		}
		f = out
	}
	s, err := openTar(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

// readSmall reads a JSON document from s, at most maxDoc bytes.
func readSmall(s source, name string) ([]byte, error) {
	r, err := s.open(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxDoc+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDoc {
		return nil, reject.New(reject.Invalid, name, "more than %d bytes", maxDoc)
	}
	return b, nil
}

// maxDoc bounds an index, manifest or config document.
const maxDoc = 4 << 20
