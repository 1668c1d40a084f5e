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
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Limits on what one import may unpack; variables for tests.
var (
	MaxImageBytes   int64 = 32 << 30 // bytes of files, all layers together
	MaxImageEntries       = 2_000_000
)

// LimitError is an import that would pass one of the limits.
type LimitError struct {
	What string
	Max  int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s is over the limit of %d", e.What, e.Max)
}

// Limit: an import too big is the limit category.
func (e *LimitError) Limit() bool { return true }

// unpacker applies layers, in order, to a staging root.
type unpacker struct {
	root     *os.Root
	dir      string // the root's real path
	rootFD   int    // an O_PATH descriptor of it, for openat2
	chown    bool
	bytes    int64
	entries  int
	stats    Stats
	dirModes map[string]fs.FileMode
	added    map[string]bool // by the layer being applied
}

// Stats say what an unpack left out or changed.
type Stats struct {
	Special int `json:"special"` // device nodes, fifos, sockets: left out
	SetID   int `json:"setid"`   // files whose setuid or setgid bit was dropped
}

func newUnpacker(dir string) (*unpacker, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, err
	}
	fd, err := openDir(real)
	if err != nil {
		r.Close()
		return nil, err
	}
	return &unpacker{root: r, dir: real, rootFD: fd, chown: os.Geteuid() == 0, dirModes: map[string]fs.FileMode{}}, nil
}

// resolve is directory dir of the root as a path with no symlink in it:
// every symlink on the way is followed as the image's own programs will
// see it, inside the root (openat2 RESOLVE_IN_ROOT: an absolute target
// is the root's, ".." stops at the root), never outside it. With create,
// missing directories are made (0755).
func (u *unpacker) resolve(dir string, create bool) (string, error) {
	if dir == "" || dir == "." {
		return "", nil
	}
	fd, err := openDirInRoot(u.rootFD, dir)
	if errors.Is(err, unix.ENOENT) && create {
		parent, base := path.Split(strings.TrimSuffix(dir, "/"))
		p, err := u.resolve(strings.TrimSuffix(parent, "/"), true)
		if err != nil {
			return "", err
		}
		if err := u.root.Mkdir(path.Join(p, base), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		return u.resolve(dir, false)
	}
	if err != nil {
		return "", &os.PathError{Op: "resolve", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	if real == u.dir {
		return "", nil
	}
	rel, ok := strings.CutPrefix(real, u.dir+"/")
	if !ok {
		return "", fmt.Errorf("%s resolves to %s, outside the root", dir, real)
	}
	return rel, nil
}

// apply reads one layer (compressed or not) from r and applies it,
// writing its tar stream, all of it, to sum. where names it in errors.
func (u *unpacker) apply(r io.Reader, sum io.Writer, where string) error {
	br := bufio.NewReader(r)
	head, _ := br.Peek(4)
	var tr io.Reader = br
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return reject.Wrap(reject.Malformed, where, err)
		}
		zr.Multistream(true)
		tr = zr
	case bytes.Equal(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return reject.Wrap(reject.Malformed, where, err)
		}
		defer zr.Close()
		tr = zr
	}
	tr = io.TeeReader(tr, sum)
	if err := u.untar(tr, where); err != nil {
		return err
	}
	// The rest (the archive's end and padding) is part of its digest.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return reject.Wrap(reject.Malformed, where, err)
	}
	return nil
}

// untar applies the tar stream r.
func (u *unpacker) untar(r io.Reader, where string) error {
	u.added = map[string]bool{}
	t := tar.NewReader(r)
	for {
		h, err := t.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return reject.Wrap(reject.Malformed, where, err)
		}
		if err := u.entry(t, h); err != nil {
			var re *reject.Error
			var le *LimitError
			if errors.As(err, &re) || errors.As(err, &le) {
				return fmt.Errorf("%s: %w", where, err)
			}
			return reject.New(reject.Invalid, where, "entry %q: %v", clip(h.Name), err)
		}
	}
}

func (u *unpacker) entry(t io.Reader, h *tar.Header) error {
	switch h.Typeflag {
	case tar.TypeXHeader, tar.TypeXGlobalHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil
	}
	u.entries++
	if u.entries > MaxImageEntries {
		return &LimitError{What: "the number of entries", Max: int64(MaxImageEntries)}
	}
	name, ok := cleanName(h.Name)
	if !ok {
		if strings.Trim(h.Name, "./") == "" && h.Typeflag == tar.TypeDir {
			return nil // the root itself
		}
		return errors.New("not a relative path inside the root")
	}
	if !utf8.ValidString(name) {
		return errors.New("the name is not UTF-8")
	}
	if len(name) > 4000 {
		return errors.New("the name is longer than 4000 bytes")
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if base == ".wh..wh..opq" || strings.HasPrefix(base, ".wh.") {
		rdir, err := u.resolve(dir, false)
		if errors.Is(err, unix.ENOENT) {
			return nil // nothing below to white out
		}
		if err != nil {
			return err
		}
		if base == ".wh..wh..opq" {
			return u.opaque(rdir)
		}
		if base == ".wh." {
			return errors.New("a whiteout that names nothing")
		}
		return u.root.RemoveAll(path.Join(rdir, base[len(".wh."):]))
	}
	// The entry's directory as the image's programs will see it: through
	// the symlinks earlier entries made, inside the root.
	rdir, err := u.resolve(dir, true)
	if err != nil {
		return err
	}
	name = path.Join(rdir, base)
	perm := fs.FileMode(h.Mode) & fs.ModePerm
	if h.Mode&(0o4000|0o2000) != 0 && h.Typeflag != tar.TypeDir {
		u.stats.SetID++
	}
	u.added[name] = true
	switch h.Typeflag {
	case tar.TypeDir:
		if fi, err := u.root.Lstat(name); err != nil || !fi.IsDir() {
			if err := u.replace(name); err != nil {
				return err
			}
			if err := u.root.Mkdir(name, 0o755); err != nil {
				return err
			}
		}
		if h.Mode&0o1000 != 0 {
			perm |= fs.ModeSticky
		}
		u.dirModes[name] = perm
		return u.own(name, h)
	case tar.TypeReg, tar.TypeRegA:
		if h.Size < 0 {
			return errors.New("negative size")
		}
		if u.bytes += h.Size; u.bytes > MaxImageBytes {
			return &LimitError{What: "the bytes of the image's files", Max: MaxImageBytes}
		}
		if err := u.replace(name); err != nil {
			return err
		}
		f, err := u.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.CopyN(f, t, h.Size)
		if err == nil {
			err = f.Chmod(perm)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		return u.own(name, h)
	case tar.TypeSymlink:
		if h.Linkname == "" || strings.ContainsRune(h.Linkname, 0) {
			return errors.New("a symlink to nothing")
		}
		if err := u.replace(name); err != nil {
			return err
		}
		if err := u.root.Symlink(h.Linkname, name); err != nil {
			return err
		}
		return u.own(name, h)
	case tar.TypeLink:
		target, ok := cleanName(h.Linkname)
		if !ok {
			return fmt.Errorf("a hard link to %q, outside the root", clip(h.Linkname))
		}
		tdir, err := u.resolve(path.Dir(target), false)
		if err != nil {
			return fmt.Errorf("a hard link to %q, which is not in the image", clip(h.Linkname))
		}
		target = path.Join(tdir, path.Base(target))
		fi, err := u.root.Lstat(target)
		if err != nil {
			return fmt.Errorf("a hard link to %q, which is not in the image", clip(h.Linkname))
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("a hard link to %q, which is not a regular file", clip(h.Linkname))
		}
		if target == name {
			return nil
		}
		if err := u.replace(name); err != nil {
			return err
		}
		return u.root.Link(target, name)
	default:
		// Devices, fifos and anything else: a run has its own /dev.
		delete(u.added, name)
		u.stats.Special++
		return nil
	}
}

// replace removes what a lower layer left at name.
func (u *unpacker) replace(name string) error {
	err := u.root.RemoveAll(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// own gives name the owner the layer names (when this process may).
func (u *unpacker) own(name string, h *tar.Header) error {
	if !u.chown {
		return nil
	}
	return u.root.Lchown(name, h.Uid, h.Gid)
}

// opaque empties dir of what lower layers put there.
func (u *unpacker) opaque(dir string) error {
	if dir == "" {
		dir = "."
	}
	f, err := u.root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		if dir == "." {
			p = e.Name()
		}
		if !u.added[p] {
			if err := u.root.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	u.added[dir] = true
	return nil
}

// finish gives directories their modes, deepest first (they were made
// writable while the layers were applied).
func (u *unpacker) finish() error {
	names := make([]string, 0, len(u.dirModes))
	for n := range u.dirModes {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, n := range names {
		fi, err := u.root.Lstat(n)
		if err != nil || !fi.IsDir() {
			continue
		}
		if err := u.root.Chmod(n, u.dirModes[n]); err != nil {
			return err
		}
	}
	if err := u.root.Chmod(".", 0o755); err != nil {
		return err
	}
	return u.close()
}

// close lets go of the root (again: a no-op).
func (u *unpacker) close() error {
	if u.rootFD >= 0 {
		unix.Close(u.rootFD)
		u.rootFD = -1
	}
	return u.root.Close()
}

// RootfsType is the type tag of a root filesystem's listing.
const RootfsType = "sandbox.rootfs/1"

// Listing lists a root filesystem; its canonical JSON's address is the
// root's address.
type Listing struct {
	Type    string  `json:"type"`
	Entries []Entry `json:"entries"`
}

// Entry is one path of a root filesystem.
type Entry struct {
	Path   string     `json:"path"`
	Kind   string     `json:"kind"` // "dir", "file" or "symlink"
	Mode   uint32     `json:"mode"` // permission bits (and sticky)
	UID    uint32     `json:"uid"`
	GID    uint32     `json:"gid"`
	Size   int64      `json:"size,omitempty"`
	Addr   *addr.Addr `json:"addr,omitempty"`   // a file's BLAKE3 address
	Target string     `json:"target,omitempty"` // a symlink's target
}

// listed is how much a listing holds.
type listed struct {
	entries int
	bytes   int64 // of its files
}

// list lists the root filesystem at dir, reading every file.
func list(dir string) ([]byte, addr.Addr, listed, error) {
	l := Listing{Type: RootfsType, Entries: []Entry{}}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(p, dir+"/"))
		e := Entry{Path: rel, Mode: uint32(fi.Mode().Perm())}
		if fi.Mode()&fs.ModeSticky != 0 {
			e.Mode |= 0o1000
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.UID, e.GID = st.Uid, st.Gid
		}
		switch {
		case fi.IsDir():
			e.Kind = "dir"
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Kind = "symlink"
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.Kind, e.Size = "file", fi.Size()
			a, err := addr.OfFile(p)
			if err != nil {
				return err
			}
			e.Addr = &a
			total += fi.Size()
		default:
			return fmt.Errorf("%s: an unexpected %v in a root filesystem", rel, fi.Mode().Type())
		}
		l.Entries = append(l.Entries, e)
		return nil
	})
	if err != nil {
		return nil, addr.Addr{}, listed{}, err
	}
	b, err := jcs.Marshal(l)
	if err != nil {
		return nil, addr.Addr{}, listed{}, err
	}
	return b, addr.Of(b), listed{entries: len(l.Entries), bytes: total}, nil
}
