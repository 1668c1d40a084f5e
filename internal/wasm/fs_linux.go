//go:build linux

package wasm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// linuxFS opens everything beneath a storage grant's root with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): no "..", absolute
// symlink or magic link can lead out of the grant a path was decided in.
// Each grant's root is reached without following any link (hostpath) and
// held open for the run. Where grants share a file system (one nested in
// another), every access is also checked against the grant the object
// really lies in now, which a rename of a directory above a nested grant
// can make differ from the grant its path names.
type linuxFS struct {
	enf    *grant.Enforcer
	roots  []root // longest path first
	shared bool   // two grant roots are on one device
}

type root struct {
	path string
	fd   int
	id   hostpath.ID
}

// newHostFS holds each grant's root open; remap names the host directory
// a grant's path is at now, where it is not at that path (a continued
// run's restored workspace): the guest and the decisions keep the path.
func newHostFS(enf *grant.Enforcer, grants []grant.Storage, remap map[string]string, guard hostpath.Guard) (hostFS, error) {
	h := &linuxFS{enf: enf}
	devs := map[uint64]bool{}
	for _, g := range grants {
		at := g.Path
		if r, ok := remap[g.Path]; ok {
			at = r
		}
		o, err := grant.Reach(guard, g, at)
		if err != nil {
			h.close()
			return nil, err
		}
		h.shared = h.shared || devs[o.ID.Dev]
		devs[o.ID.Dev] = true
		h.roots = append(h.roots, root{path: g.Path, fd: o.Release(), id: o.ID})
	}
	sort.Slice(h.roots, func(i, j int) bool { return len(h.roots[i].path) > len(h.roots[j].path) })
	return h, nil
}

// probeOpenat2 reports whether the kernel has openat2.
func probeOpenat2() error {
	fd, err := unix.Openat2(unix.AT_FDCWD, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH})
	if err != nil {
		return fmt.Errorf("openat2 with RESOLVE_BENEATH is not available: %w", err)
	}
	unix.Close(fd)
	return nil
}

func (h *linuxFS) close() error {
	for _, r := range h.roots {
		unix.Close(r.fd)
	}
	h.roots = nil
	return nil
}

// locate returns the most specific grant root holding abs and the path
// relative to it ("." for the root itself).
func (h *linuxFS) locate(abs string) (*root, string, experimentalsys.Errno) {
	for i := range h.roots {
		r := &h.roots[i]
		if grant.Within(r.path, abs) {
			rel := strings.TrimPrefix(strings.TrimPrefix(abs, r.path), "/")
			if rel == "" {
				rel = "."
			}
			return r, rel, 0
		}
	}
	return nil, "", experimentalsys.EACCES
}

func (h *linuxFS) beneath(r *root, rel string, flags uint64, mode uint32) (int, experimentalsys.Errno) {
	if flags&(unix.O_CREAT|unix.O_TMPFILE) == 0 {
		mode = 0 // openat2 refuses a mode it would not use
	}
	fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, errnoOf(err)
	}
	if !h.lies(fd, r) {
		unix.Close(fd)
		return -1, errRefused
	}
	return fd, 0
}

// errnoOf maps a host error; an attempt to resolve out of the grant is
// errRefused, which the broker logs and the guest sees as EACCES.
func errnoOf(err error) experimentalsys.Errno {
	if errors.Is(err, unix.EXDEV) {
		return errRefused
	}
	return experimentalsys.UnwrapOSError(err)
}

// lies reports whether the object open at fd lies in grant r itself and
// not in another grant's root below it (or, after a rename, anywhere
// else). It reads where the kernel says the object and every root are
// now, so a renamed directory is followed. Only grants that share a
// device can contain each other; otherwise there is nothing to check.
func (h *linuxFS) lies(fd int, r *root) bool {
	if !h.shared {
		return true
	}
	p, err := fdPath(fd)
	if err != nil {
		return false
	}
	best, bestLen := (*root)(nil), -1
	for i := range h.roots {
		g := &h.roots[i]
		gp, err := fdPath(g.fd)
		if err != nil {
			continue
		}
		if (p == gp || strings.HasPrefix(p, gp+"/") || gp == "/") && len(gp) > bestLen {
			best, bestLen = g, len(gp)
		}
	}
	return best == r
}

// fdPath is where the kernel says the file open at fd is now.
func fdPath(fd int) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// parent opens the directory holding rel's last component; the grant root
// itself has no parent inside the grant. The last component may not be
// another grant's root (renaming, removing or changing a grant's root
// through a path that names another grant).
func (h *linuxFS) parent(abs string) (int, string, experimentalsys.Errno) {
	r, rel, e := h.locate(abs)
	if e != 0 {
		return -1, "", e
	}
	if rel == "." {
		return -1, "", experimentalsys.EPERM
	}
	fd, e := h.beneath(r, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
	if e != 0 {
		return -1, "", e
	}
	base := path.Base(rel)
	if h.shared {
		var st unix.Stat_t
		if unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			for _, g := range h.roots {
				if g.id == (hostpath.ID{Dev: uint64(st.Dev), Ino: st.Ino}) {
					unix.Close(fd)
					return -1, "", errRefused
				}
			}
		}
	}
	return fd, base, 0
}

func oflags(flag experimentalsys.Oflag) uint64 {
	var f uint64
	switch {
	case flag&experimentalsys.O_RDWR != 0:
		f = unix.O_RDWR
	case flag&experimentalsys.O_WRONLY != 0:
		f = unix.O_WRONLY
	default:
		f = unix.O_RDONLY
	}
	for _, m := range []struct {
		w experimentalsys.Oflag
		u uint64
	}{
		{experimentalsys.O_APPEND, unix.O_APPEND}, {experimentalsys.O_CREAT, unix.O_CREAT},
		{experimentalsys.O_DIRECTORY, unix.O_DIRECTORY}, {experimentalsys.O_DSYNC, unix.O_DSYNC},
		{experimentalsys.O_EXCL, unix.O_EXCL}, {experimentalsys.O_NOFOLLOW, unix.O_NOFOLLOW},
		{experimentalsys.O_RSYNC, unix.O_RSYNC}, {experimentalsys.O_SYNC, unix.O_SYNC},
		{experimentalsys.O_TRUNC, unix.O_TRUNC},
	} {
		if flag&m.w != 0 {
			f |= m.u
		}
	}
	return f
}

func (h *linuxFS) open(abs string, flag experimentalsys.Oflag, perm fs.FileMode) (hostFile, experimentalsys.Errno) {
	r, rel, e := h.locate(abs)
	if e != 0 {
		return nil, e
	}
	var fd int
	if h.shared {
		fd, e = h.openChecked(abs, r, rel, oflags(flag), uint32(perm.Perm()))
	} else {
		fd, e = h.beneath(r, rel, oflags(flag), uint32(perm.Perm()))
	}
	if e != 0 {
		return nil, e
	}
	return &osFile{f: os.NewFile(uintptr(fd), abs)}, 0
}

// openChecked opens where grants are nested: an open may truncate or
// create, so the object is found and checked first (an O_PATH open that
// changes nothing) and then reopened through that very descriptor. A
// name that does not exist yet is created in its parent, checked, and
// never through a symbolic link.
func (h *linuxFS) openChecked(abs string, r *root, rel string, flags uint64, mode uint32) (int, experimentalsys.Errno) {
	pfd, e := h.beneath(r, rel, unix.O_PATH|flags&(unix.O_NOFOLLOW|unix.O_DIRECTORY), 0)
	switch {
	case e == 0:
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return -1, experimentalsys.UnwrapOSError(err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK { // O_NOFOLLOW on a link
			return -1, experimentalsys.ELOOP
		}
		if flags&unix.O_CREAT != 0 && flags&unix.O_EXCL != 0 {
			return -1, experimentalsys.EEXIST
		}
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), int(flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW))|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, experimentalsys.UnwrapOSError(err)
		}
		return fd, 0
	case e == experimentalsys.ENOENT && flags&unix.O_CREAT != 0:
		dir, base, e := h.parent(abs)
		if e != 0 {
			return -1, e
		}
		defer unix.Close(dir)
		fd, err := unix.Openat(dir, base, int(flags|unix.O_NOFOLLOW|unix.O_CLOEXEC), mode)
		if err != nil {
			return -1, experimentalsys.UnwrapOSError(err)
		}
		return fd, 0
	}
	return -1, e
}

func (h *linuxFS) stat(abs string, follow bool) (sys.Stat_t, experimentalsys.Errno) {
	var st unix.Stat_t
	if follow {
		r, rel, e := h.locate(abs)
		if e != 0 {
			return sys.Stat_t{}, e
		}
		fd, e := h.beneath(r, rel, unix.O_PATH, 0)
		if e != 0 {
			return sys.Stat_t{}, e
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return sys.Stat_t{}, experimentalsys.UnwrapOSError(err)
		}
		return fromUnix(&st), 0
	}
	r, rel, e := h.locate(abs)
	if e != 0 {
		return sys.Stat_t{}, e
	}
	if rel == "." {
		if err := unix.Fstat(r.fd, &st); err != nil {
			return sys.Stat_t{}, experimentalsys.UnwrapOSError(err)
		}
		return fromUnix(&st), 0
	}
	pfd, base, e := h.parent(abs)
	if e != 0 {
		return sys.Stat_t{}, e
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return sys.Stat_t{}, experimentalsys.UnwrapOSError(err)
	}
	return fromUnix(&st), 0
}

func fromUnix(st *unix.Stat_t) sys.Stat_t {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return sys.Stat_t{
		Dev: uint64(st.Dev), Ino: st.Ino, Mode: mode, Nlink: uint64(st.Nlink), Size: st.Size,
		Atim: st.Atim.Nano(), Mtim: st.Mtim.Nano(), Ctim: st.Ctim.Nano(),
	}
}

// viaFD runs fn on the /proc/self/fd path of abs opened beneath its grant,
// for calls that have no *at form that refuses to follow symlinks.
func (h *linuxFS) viaFD(abs string, fn func(p string) error) experimentalsys.Errno {
	r, rel, e := h.locate(abs)
	if e != 0 {
		return e
	}
	fd, e := h.beneath(r, rel, unix.O_PATH, 0)
	if e != 0 {
		return e
	}
	defer unix.Close(fd)
	return experimentalsys.UnwrapOSError(fn("/proc/self/fd/" + strconv.Itoa(fd)))
}

// atParent runs fn on the directory holding abs (opened beneath its
// grant) and the last element of abs.
func (h *linuxFS) atParent(abs string, fn func(pfd int, base string) error) experimentalsys.Errno {
	pfd, base, e := h.parent(abs)
	if e != 0 {
		return e
	}
	defer unix.Close(pfd)
	return experimentalsys.UnwrapOSError(fn(pfd, base))
}

// atParents is atParent for two paths (rename, link).
func (h *linuxFS) atParents(from, to string, fn func(a int, an string, b int, bn string) error) experimentalsys.Errno {
	a, an, e := h.parent(from)
	if e != 0 {
		return e
	}
	defer unix.Close(a)
	return h.atParent(to, func(b int, bn string) error { return fn(a, an, b, bn) })
}

func (h *linuxFS) mkdir(abs string, perm fs.FileMode) experimentalsys.Errno {
	return h.atParent(abs, func(pfd int, base string) error { return unix.Mkdirat(pfd, base, uint32(perm.Perm())) })
}

func (h *linuxFS) chmod(abs string, perm fs.FileMode) experimentalsys.Errno {
	return h.viaFD(abs, func(p string) error { return unix.Chmod(p, uint32(perm.Perm())) })
}

func (h *linuxFS) rename(from, to string) experimentalsys.Errno {
	return h.atParents(from, to, func(a int, an string, b int, bn string) error { return unix.Renameat(a, an, b, bn) })
}

func (h *linuxFS) rmdir(abs string) experimentalsys.Errno {
	return h.atParent(abs, func(pfd int, base string) error { return unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR) })
}

func (h *linuxFS) unlink(abs string) experimentalsys.Errno {
	return h.atParent(abs, func(pfd int, base string) error { return unix.Unlinkat(pfd, base, 0) })
}

func (h *linuxFS) link(from, to string) experimentalsys.Errno {
	return h.atParents(from, to, func(a int, an string, b int, bn string) error { return unix.Linkat(a, an, b, bn, 0) })
}

func (h *linuxFS) symlink(target, link string) experimentalsys.Errno {
	return h.atParent(link, func(pfd int, base string) error { return unix.Symlinkat(target, pfd, base) })
}

func (h *linuxFS) readlink(abs string) (string, experimentalsys.Errno) {
	pfd, base, e := h.parent(abs)
	if e != 0 {
		return "", e
	}
	defer unix.Close(pfd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(pfd, base, buf)
	if err != nil {
		return "", experimentalsys.UnwrapOSError(err)
	}
	return string(buf[:n]), 0
}

func (h *linuxFS) utimens(abs string, atim, mtim int64) experimentalsys.Errno {
	return h.viaFD(abs, func(p string) error {
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, timespecs(atim, mtim), 0)
	})
}

func timespecs(atim, mtim int64) []unix.Timespec {
	ts := func(ns int64) unix.Timespec {
		switch ns {
		case experimentalsys.UTIME_OMIT:
			return unix.Timespec{Nsec: unix.UTIME_OMIT}
		}
		return unix.NsecToTimespec(ns)
	}
	return []unix.Timespec{ts(atim), ts(mtim)}
}

// osFile adapts an *os.File opened beneath a grant to wazero's sys.File.
type osFile struct {
	experimentalsys.UnimplementedFile
	f *os.File
}

func (o *osFile) Stat() (sys.Stat_t, experimentalsys.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(int(o.f.Fd()), &st); err != nil {
		return sys.Stat_t{}, experimentalsys.UnwrapOSError(err)
	}
	return fromUnix(&st), 0
}

func (o *osFile) Dev() (uint64, experimentalsys.Errno) {
	st, e := o.Stat()
	return st.Dev, e
}

func (o *osFile) Ino() (sys.Inode, experimentalsys.Errno) {
	st, e := o.Stat()
	return st.Ino, e
}

func (o *osFile) IsDir() (bool, experimentalsys.Errno) {
	st, e := o.Stat()
	return st.Mode.IsDir(), e
}

func (o *osFile) IsAppend() bool {
	fl, err := unix.FcntlInt(o.f.Fd(), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_APPEND != 0
}

func (o *osFile) SetAppend(enable bool) experimentalsys.Errno {
	fl, err := unix.FcntlInt(o.f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return experimentalsys.UnwrapOSError(err)
	}
	if enable {
		fl |= unix.O_APPEND
	} else {
		fl &^= unix.O_APPEND
	}
	_, err = unix.FcntlInt(o.f.Fd(), unix.F_SETFL, fl)
	return experimentalsys.UnwrapOSError(err)
}

func eof(n int, err error) (int, experimentalsys.Errno) {
	if err == io.EOF {
		err = nil
	}
	return n, experimentalsys.UnwrapOSError(err)
}

func (o *osFile) Read(buf []byte) (int, experimentalsys.Errno) { return eof(o.f.Read(buf)) }
func (o *osFile) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	return eof(o.f.ReadAt(buf, off))
}

func (o *osFile) Seek(off int64, whence int) (int64, experimentalsys.Errno) {
	n, err := o.f.Seek(off, whence)
	return n, experimentalsys.UnwrapOSError(err)
}

func (o *osFile) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	ents, err := o.f.ReadDir(n)
	if err == io.EOF {
		err = nil
	}
	out := make([]experimentalsys.Dirent, 0, len(ents))
	for _, d := range ents {
		var ino uint64
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*unix.Stat_t); ok {
				ino = st.Ino
			}
		}
		out = append(out, experimentalsys.Dirent{Ino: ino, Name: d.Name(), Type: d.Type()})
	}
	return out, experimentalsys.UnwrapOSError(err)
}

func (o *osFile) Write(buf []byte) (int, experimentalsys.Errno) {
	n, err := o.f.Write(buf)
	return n, experimentalsys.UnwrapOSError(err)
}

func (o *osFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	n, err := o.f.WriteAt(buf, off)
	return n, experimentalsys.UnwrapOSError(err)
}

func (o *osFile) Truncate(size int64) experimentalsys.Errno {
	return experimentalsys.UnwrapOSError(o.f.Truncate(size))
}

func (o *osFile) Sync() experimentalsys.Errno { return experimentalsys.UnwrapOSError(o.f.Sync()) }
func (o *osFile) Datasync() experimentalsys.Errno {
	return experimentalsys.UnwrapOSError(unix.Fdatasync(int(o.f.Fd())))
}

func (o *osFile) Utimens(atim, mtim int64) experimentalsys.Errno {
	p := "/proc/self/fd/" + strconv.Itoa(int(o.f.Fd()))
	return experimentalsys.UnwrapOSError(unix.UtimesNanoAt(unix.AT_FDCWD, p, timespecs(atim, mtim), 0))
}

func (o *osFile) Close() experimentalsys.Errno { return experimentalsys.UnwrapOSError(o.f.Close()) }

// probeBeneath checks that openat2 exists and that a symlink to "/" inside
// a directory cannot be followed out of it.
func probeBeneath(mkTemp func(parent, prefix string) (string, error)) error {
	if err := probeOpenat2(); err != nil {
		return err
	}
	dir, err := mkTemp(os.TempDir(), "sandbox-probe")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink("/", path.Join(dir, "escape")); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	got, err := unix.Openat2(fd, "escape/etc", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
	if err == nil {
		unix.Close(got)
		return fmt.Errorf("openat2(RESOLVE_BENEATH) followed a symlink out of its directory")
	}
	if !errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("openat2(RESOLVE_BENEATH) on an escaping symlink: %v, want EXDEV", err)
	}
	return nil
}
