//go:build linux

package s1init

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// commit applies an overlay upper layer to the lower directory it was
// made over: whiteouts delete, opaque directories replace, files and
// symlinks are copied, all resolved beneath the lower directory without
// following any symlink (the guest wrote the upper layer). New entries
// get the lower directory's owner.
func commit(upper, lower string) error {
	lfd, err := unix.Open(lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(lfd)
	var lst unix.Stat_t
	if err := unix.Fstat(lfd, &lst); err != nil {
		return err
	}
	var errs []error
	err = filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		if e := commitOne(lfd, p, rel, int(lst.Uid), int(lst.Gid)); e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rel, e))
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parentBeneath opens the directory holding rel inside the lower root.
func parentBeneath(lfd int, rel string) (int, string, error) {
	dir, base := filepath.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := unix.Openat2(lfd, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	return fd, base, err
}

func removeAt(pfd int, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(pfd, base, 0)
	}
	// A directory: empty it beneath, then remove it.
	dfd, err := unix.Openat2(pfd, base, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS})
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dfd), base)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		if err := removeAt(dfd, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	return unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR)
}

func commitOne(lfd int, src, rel string, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	pfd, base, err := parentBeneath(lfd, rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	mode := st.Mode & 0o7777 &^ (unix.S_ISUID | unix.S_ISGID)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev == 0 { // a whiteout: the guest deleted it
			return removeAt(pfd, base)
		}
		return nil // device nodes are not carried out of a run
	case unix.S_IFDIR:
		opaque := make([]byte, 1)
		if n, _ := unix.Lgetxattr(src, "trusted.overlay.opaque", opaque); n == 1 && opaque[0] == 'y' {
			if err := removeAt(pfd, base); err != nil {
				return err
			}
		}
		var cur unix.Stat_t
		if err := unix.Fstatat(pfd, base, &cur, unix.AT_SYMLINK_NOFOLLOW); err == nil && cur.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(pfd, base); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(pfd, base, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		return unix.Fchmodat(pfd, base, mode, 0)
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := removeAt(pfd, base); err != nil {
			return err
		}
		if err := unix.Symlinkat(target, pfd, base); err != nil {
			return err
		}
		return unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	case unix.S_IFREG:
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		tmp := ".sandbox-commit-" + base
		if len(tmp) > 255 {
			tmp = tmp[:255]
		}
		tfd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err != nil {
			return err
		}
		out := os.NewFile(uintptr(tfd), tmp)
		_, cerr := io.Copy(out, in)
		if cerr == nil {
			cerr = out.Sync()
		}
		unix.Fchown(tfd, uid, gid)
		unix.Fchmod(tfd, mode)
		out.Close()
		if cerr != nil {
			unix.Unlinkat(pfd, tmp, 0)
			return cerr
		}
		var cur unix.Stat_t
		if err := unix.Fstatat(pfd, base, &cur, unix.AT_SYMLINK_NOFOLLOW); err == nil && cur.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := removeAt(pfd, base); err != nil {
				return err
			}
		}
		return unix.Renameat(pfd, tmp, pfd, base)
	}
	return nil // fifos and sockets are not carried out of a run
}
