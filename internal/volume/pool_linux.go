package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// xfsFormatter is mkfs.xfs (xfsprogs).
func xfsFormatter() (string, error) { return formatter("mkfs.xfs", "xfsprogs") }

// Pool mounts on dir a filesystem that shares extents (XFS with
// reflinks), for volumes whose own directory's filesystem cannot (ext4,
// tmpfs): their images made under it are copied by Snapshot and
// MakeFrom at no cost in data. Its image is beside dir (Image), sparse,
// of size bytes (0: what is free now on the filesystem that holds it,
// less a reserve, poolReserve), mounted through a loop device that reads
// and writes the image directly (no second copy of its pages in memory)
// and gives back the blocks of the files deleted in it, a removed
// volume's image among them (discard: holes punched in the image). A
// size above what is free there, less the reserve, is refused: the
// pool's writes would fail once that space is gone. Like every sparse image, the pool still
// counts on the filesystem under it keeping that space free.
//
// A pool is the host's, like the system's temporary directory, and
// outlives the process that made it: where dir holds one already (made
// by another process, or before a restart of this one) Pool uses it,
// whatever its size; where its image is there and not mounted (after the
// machine restarted, where the directory survives that), it is mounted
// again; where dir is the mount point of another filesystem, Pool
// refuses it, and so it refuses names another user made first (dir, its
// image, its lock). Two processes making it at once are one after the
// other (a lock beside it). On failure no image it made is left, and
// nothing mounted; dir and its lock stay.
func Pool(dir string, size int64) error { return pool(dir, size, true) }

// MountPool mounts the pool on dir again where its image is beside it
// and it is not mounted, as Pool does; it makes none.
func MountPool(dir string) error { return pool(dir, 0, false) }

func pool(dir string, size int64, make bool) error {
	if size < 0 || size > 0 && size < MinPool {
		return fmt.Errorf("a volume pool of %d bytes: under %d, the least one is made with", size, MinPool)
	}
	if !make {
		// None to mount, or another user's (never this host's pool):
		// nothing is made.
		if mine, err := mineOrGone(Image(dir)); err != nil || !mine {
			return errors.Join(err, fmt.Errorf("%s: %w", Image(dir), os.ErrNotExist))
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: mounting a filesystem needs root", ErrNotSupported)
	}
	// In a directory anyone may write to (the system's temporary one),
	// another user could have made the names first: a symbolic link, or
	// an image of theirs to be mounted with the workspaces in it. Each is
	// opened without following links and must be this user's alone.
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := ourDir(dir); err != nil {
		return err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := oursOpen(lock, false); err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if mounted(dir) {
		if err := isPool(dir); err != nil {
			return err
		}
		return os.Chmod(dir, 0o711)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return fmt.Errorf("%s: not an empty directory, and no volume pool is mounted on it (%v)", dir, err)
	}
	img := Image(dir)
	if _, err := os.Lstat(img); err == nil || !make {
		f, err := openOurs(img)
		if err != nil {
			return err
		}
		defer f.Close()
		return mountPool(f, dir, func(f *os.File) (*os.File, string, error) { return attachAgain(f, true) })
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	room := free - poolReserve(int64(st.Blocks)*int64(st.Bsize))
	switch {
	case size == 0 && room < MinPool:
		return fmt.Errorf("a volume pool beside %s: %d bytes free there, less a reserve, is under %d, the least one is made with", dir, free, MinPool)
	case size == 0:
		size = room
	case size > room:
		return fmt.Errorf("a volume pool of %d bytes beside %s, where %d are free, less a reserve of %d: its writes would fail once they are used", size, dir, free, free-room)
	}
	mk, err := xfsFormatter()
	if err != nil {
		return err
	}
	// Made under another name, and given its own once it is whole: a
	// process killed while it is made leaves none that looks like a pool
	// (and the next maker, holding the lock, removes what it left).
	part := img + ".part"
	if err := os.Remove(part); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Reflinks on; 4 KiB sectors, so that the loop device can read and
	// write the image directly; nothing discarded while it is made (the
	// image is sparse already).
	f, err := newImage(part, size&^4095, mk, "-q", "-f", "-K", "-m", "reflink=1", "-s", "size=4096")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.Rename(part, img); err != nil {
		os.Remove(part)
		return err
	}
	if err := mountPool(f, dir, attachDirect); err != nil {
		os.Remove(img)
		return err
	}
	return nil
}

// poolReserve is what a pool leaves free on a filesystem of size bytes:
// a tenth of it, at least 1 GiB.
func poolReserve(size int64) int64 { return max(size/10, 1<<30) }

// openOurs opens path, an image, for reading and writing, if it is this
// user's alone (ours) and has no other name.
func openOurs(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if err := oursOpen(f, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ourDir checks that path is a directory of this user's alone (oursOpen),
// not a symbolic link.
func ourDir(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_PATH, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return oursOpen(f, true)
}

// oursOpen checks that f is this user's alone: a directory (dir) or a
// regular file, owned by this user, that no other may write to (nor
// read, for a file), and, a file, with no other name.
func oursOpen(f *os.File, dir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	kind, other := uint32(unix.S_IFREG), uint32(0o077)
	if dir {
		kind, other = unix.S_IFDIR, 0o022
	}
	if st.Mode&unix.S_IFMT != kind || int(st.Uid) != os.Geteuid() || st.Mode&other != 0 || !dir && st.Nlink != 1 {
		return fmt.Errorf("%s: not this host's (mode %#o, owner %d, %d names): another user's, or made by hand; refused", f.Name(), st.Mode, st.Uid, st.Nlink)
	}
	return nil
}

// mountPool mounts the XFS image f on dir through a loop device (by on),
// giving back what is deleted, and makes its root traversable, not
// listable (the names of the volumes in it are nobody else's to read);
// on failure nothing is left mounted.
func mountPool(f *os.File, dir string, on func(*os.File) (*os.File, string, error)) error {
	if err := mountLoop(f, dir, "xfs", "discard", on); err != nil {
		return err
	}
	if err := errors.Join(isPool(dir), os.Chmod(dir, 0o711)); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return err
	}
	return nil
}

// isPool says whether the filesystem mounted on dir is a pool: XFS,
// sharing extents.
func isPool(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if st.Type != unix.XFS_SUPER_MAGIC {
		return fmt.Errorf("%s: a filesystem of another kind (%#x) is mounted there, not a volume pool", dir, st.Type)
	}
	return Reflinks(dir)
}

// Reflinks says whether files in dir can share extents (FICLONE), by
// cloning one into another there; the error wraps ErrNoClone where the
// filesystem cannot.
func Reflinks(dir string) error {
	a, err := os.CreateTemp(dir, ".sandbox-reflink-")
	if err != nil {
		return err
	}
	defer os.Remove(a.Name())
	defer a.Close()
	b, err := os.CreateTemp(dir, ".sandbox-reflink-")
	if err != nil {
		return err
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return clone(b, a)
}

// poolOf is the pool dir's volumes are made in, where dir lies directly
// in one ("" where it does not): the parent of dir, when the image beside
// that is this user's; an error where that image is this user's and not
// as a pool makes one (mineOrGone).
func poolOf(dir string) (string, error) {
	p := filepath.Dir(dir)
	if mine, err := mineOrGone(Image(p)); err != nil || !mine {
		return "", err
	}
	return p, nil
}

// ReleasePool unmounts the pool on dir and removes its image and lock:
// everything in it is lost, mounted or not. A pool still in use is
// refused (EBUSY), and so is a filesystem on dir that is not a pool.
func ReleasePool(dir string) error {
	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if lock != nil {
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("lock %s: %w", lock.Name(), err)
		}
	}
	if mounted(dir) {
		if err := isPool(dir); err != nil {
			return err
		}
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return errors.Join(ignoreGone(os.Remove(Image(dir))), ignoreGone(os.Remove(dir+".lock")), ignoreGone(os.Remove(dir)))
}

func ignoreGone(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
