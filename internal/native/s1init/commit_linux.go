//go:build linux

package s1init

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// block is the unit disk use is counted in: a file system block, as
// tmpfs counts pages.
const block = 4096

// commit applies an overlay upper layer to the lower directory it was
// made over: whiteouts delete, opaque directories replace, files and
// symlinks are copied, all resolved beneath the lower directory without
// following any symlink (the guest wrote the upper layer). New entries
// get the lower directory's owner.
//
// It never leaves more on the host's disk than quota bytes: it first
// counts what the commit would write, in blocks (a file's data extents,
// not its apparent size; a file with several names once; each new
// directory and each symlink too long to live in its inode one block),
// and commits nothing if that is over the quota. Files are copied sparse
// (holes stay holes) and hard links stay links.
//
// It returns how many entries (files, directories, links, deletions) it
// applied and how many bytes of file data it wrote, also on error.
func commit(upper, lower string, quota int64) (entries int, bytes int64, _ error) {
	lfd, err := unix.Open(lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(lfd)
	var lst unix.Stat_t
	if err := unix.Fstat(lfd, &lst); err != nil {
		return 0, 0, err
	}
	need, err := cost(upper, lfd)
	if err != nil {
		return 0, 0, fmt.Errorf("count the writes: %w", err)
	}
	if need > quota {
		return 0, 0, fmt.Errorf("the run's writes would take %d bytes on disk, more than the quota of %d: nothing was committed", need, quota)
	}
	c := &committer{lfd: lfd, uid: int(lst.Uid), gid: int(lst.Gid), links: map[[2]uint64]string{}}
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
		if e := c.one(p, rel); e != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rel, e))
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		c.entries++
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return c.entries, c.bytes, errors.Join(errs...)
}

// cost is what committing upper would add to the disk, in bytes of whole
// blocks.
func cost(upper string, lfd int) (int64, error) {
	seen := map[[2]uint64]bool{}
	var total int64
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			k := [2]uint64{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
			n, err := dataBlocks(p)
			if err != nil {
				return err
			}
			total += n
		case unix.S_IFDIR:
			var cur unix.Stat_t
			if unix.Fstatat(lfd, rel, &cur, unix.AT_SYMLINK_NOFOLLOW) != nil || cur.Mode&unix.S_IFMT != unix.S_IFDIR {
				total += block
			}
		case unix.S_IFLNK:
			if st.Size > 60 { // longer targets need a block of their own
				total += block
			}
		}
		return nil
	})
	return total, err
}

// dataBlocks is the size of a file's data extents, each rounded up to
// whole blocks: what a sparse copy writes.
func dataBlocks(p string) (int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var total int64
	err = extents(fd, func(off, end int64) error {
		total += roundUp(end) - off&^(block-1)
		return nil
	})
	return total, err
}

func roundUp(n int64) int64 { return (n + block - 1) &^ (block - 1) }

// extents calls fn for each data extent of the file open at fd, as
// SEEK_DATA and SEEK_HOLE report them.
func extents(fd int, fn func(off, end int64) error) error {
	var pos int64
	for {
		off, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // no data past pos
		}
		if err != nil {
			return err
		}
		end, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if end <= off {
			return fmt.Errorf("extent at %d has no length", off)
		}
		if err := fn(off, end); err != nil {
			return err
		}
		pos = end
	}
}

// committer carries one commit's state.
type committer struct {
	lfd      int
	uid, gid int
	links    map[[2]uint64]string // an upper inode → the first name committed for it
	entries  int                  // applied
	bytes    int64                // of file data written
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

func (c *committer) one(src, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	pfd, base, err := parentBeneath(c.lfd, rel)
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
		unix.Fchownat(pfd, base, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW)
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
		return unix.Fchownat(pfd, base, c.uid, c.gid, unix.AT_SYMLINK_NOFOLLOW)
	case unix.S_IFREG:
		k := [2]uint64{uint64(st.Dev), st.Ino}
		if first, ok := c.links[k]; ok && st.Nlink > 1 {
			return c.link(first, pfd, base)
		}
		if err := c.copyFile(src, pfd, base, mode); err != nil {
			return err
		}
		if st.Nlink > 1 {
			c.links[k] = rel
		}
		return nil
	}
	return nil // fifos and sockets are not carried out of a run
}

// link gives the file committed as first another name, base in pfd.
func (c *committer) link(first string, pfd int, base string) error {
	ffd, fbase, err := parentBeneath(c.lfd, first)
	if err != nil {
		return err
	}
	defer unix.Close(ffd)
	if err := removeAt(pfd, base); err != nil {
		return err
	}
	return unix.Linkat(ffd, fbase, pfd, base, 0)
}

// copyFile writes src's data extents to a new file beside base and
// renames it over base: holes stay holes.
func (c *committer) copyFile(src string, pfd int, base string, mode uint32) error {
	in, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	tmp := ".sandbox-commit-" + base
	if len(tmp) > 255 {
		tmp = tmp[:255]
	}
	out, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<16)
	cerr := extents(in, func(off, end int64) error {
		for off < end {
			n := min(int64(len(buf)), end-off)
			r, err := unix.Pread(in, buf[:n], off)
			if err != nil {
				return err
			}
			if r == 0 {
				return fmt.Errorf("short read at %d", off)
			}
			if _, err := unix.Pwrite(out, buf[:r], off); err != nil {
				return err
			}
			off += int64(r)
			c.bytes += int64(r)
		}
		return nil
	})
	if cerr == nil {
		cerr = unix.Ftruncate(out, st.Size)
	}
	if cerr == nil {
		cerr = unix.Fsync(out)
	}
	unix.Fchown(out, c.uid, c.gid)
	unix.Fchmod(out, mode)
	unix.Close(out)
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
