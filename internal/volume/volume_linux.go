package volume

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var probe struct {
	once sync.Once
	err  error
}

// mkfs is the ext4 formatter (e2fsprogs).
func mkfs() (string, error) { return formatter("mkfs.ext4", "e2fsprogs") }

// formatter is the program name of package pkg, looked up in the system
// directories as well as PATH.
func formatter(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s (%s) is not installed", ErrNotSupported, name, pkg)
}

// Probe says whether volumes can be made here, by making one (once per
// process): root, a loop device, mkfs.ext4 and an ext4 mount.
func Probe() error {
	probe.once.Do(func() {
		if os.Geteuid() != 0 {
			probe.err = fmt.Errorf("%w: mounting a workspace filesystem needs root", ErrNotSupported)
			return
		}
		dir, err := os.MkdirTemp("", "sandbox-volume-probe-")
		if err != nil {
			probe.err = err
			return
		}
		defer os.Remove(dir)
		if err := make1(dir, MinSize); err != nil {
			probe.err = fmt.Errorf("%w: %v", ErrNotSupported, err)
			return
		}
		probe.err = Release(dir)
	})
	return probe.err
}

// Make makes a filesystem of size bytes in a sparse image beside dir
// (Image) and mounts it on dir, an empty directory, with the same
// permissions (nosuid, nodev). On failure nothing of it is left.
func Make(dir string, size int64) error {
	if err := checkSize(size); err != nil {
		return err
	}
	if err := Probe(); err != nil {
		return err
	}
	return make1(dir, size)
}

func make1(dir string, size int64) (err error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		return fmt.Errorf("%s: not an empty directory", dir)
	}
	mk, err := mkfs()
	if err != nil {
		return err
	}
	img := Image(dir)
	// No reserved blocks (the bound is the guest's), inode tables and
	// journal initialised lazily (the image stays sparse).
	f, err := newImage(img, size, mk, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard")
	if err != nil {
		return err
	}
	defer f.Close()
	defer func() {
		if err != nil {
			os.Remove(img)
		}
	}()
	if err := mountImage(f, dir); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	}()
	os.Remove(filepath.Join(dir, "lost+found"))
	return os.Chmod(dir, fi.Mode().Perm())
}

// newImage makes img, a new sparse file of size bytes, and formats it
// with the program mk given args and img; on failure it is removed.
func newImage(img string, size int64, mk string, args ...string) (f *os.File, err error) {
	f, err = os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(img)
		}
	}()
	if err := f.Truncate(size); err != nil {
		return nil, err
	}
	if out, err := exec.Command(mk, append(args, img)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", filepath.Base(mk), err, strings.TrimSpace(string(out)))
	}
	return f, nil
}

// The ioctls that freeze a mounted filesystem (its dirty data written,
// new writes held) and thaw it: _IOWR('X', 119, int) and 120.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// Snapshot writes to img, a new file, a copy of the volume mounted on dir
// as it is at this moment, sharing its image's extents (a reflink: the
// copy costs no data, and each side's later writes are its own). For the
// moment of the copy the volume's filesystem is frozen, so that the
// image holds everything written to it and nothing half written; it is
// thawed before Snapshot returns. Where the filesystem under the images
// cannot share extents, nothing is copied and the error wraps
// ErrNoClone. The caller stills the volume's writers first if the copy
// must be of one moment of theirs.
func Snapshot(dir, img string) (err error) {
	if _, ok, err := Of(dir); err != nil || !ok {
		return fmt.Errorf("%s: not a volume's mount point (%v)", dir, err)
	}
	src, err := os.Open(Image(dir))
	if err != nil {
		return err
	}
	defer src.Close()
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	out, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		out.Close()
		if err != nil {
			os.Remove(img)
		}
	}()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, d.Fd(), fiFreeze, 0); e != 0 {
		return fmt.Errorf("freeze %s: %w", dir, e)
	}
	err = clone(out, src)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, d.Fd(), fiThaw, 0); e != 0 && err == nil {
		err = fmt.Errorf("thaw %s: %w", dir, e)
	}
	return err
}

// thaw thaws the filesystem mounted on dir, if it is frozen.
func thaw(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	defer d.Close()
	unix.Syscall(unix.SYS_IOCTL, d.Fd(), fiThaw, 0)
}

// MakeFrom makes dir, an empty directory, the mount point of a volume
// whose image is a copy of img sharing its extents (Snapshot's), mounted
// as Make mounts one; its bound is img's. Where the filesystem under the
// images cannot share extents, nothing is made and the error wraps
// ErrNoClone. On failure nothing of it is left.
func MakeFrom(dir, img string) (err error) {
	if err := Probe(); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 || !fi.IsDir() {
		return fmt.Errorf("%s: not an empty directory", dir)
	}
	src, err := os.Open(img)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := os.OpenFile(Image(dir), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	defer func() {
		if err != nil {
			os.Remove(Image(dir))
		}
	}()
	if err := clone(f, src); err != nil {
		return err
	}
	if err := mountImage(f, dir); err != nil {
		return err
	}
	// Its top directory as Make leaves one (the copy's is the original's,
	// whatever its users made of it): dir's mode, root's.
	if err := errors.Join(os.Chown(dir, 0, 0), os.Chmod(dir, fi.Mode().Perm())); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		return err
	}
	return nil
}

// mountImage mounts the ext4 image f on dir (nosuid, nodev), through a
// loop device that goes with the last unmount (autoclear).
func mountImage(f *os.File, dir string) error { return mountLoop(f, dir, "ext4", "", attach) }

// The ways an image is put on a loop device for mountLoop: a new image,
// on a new device (attach), a pool's, directly (attachDirect), and an
// image that may be read by a device already (attachAgain, Attach's
// and a pool's mounted again).
func attach(f *os.File) (*os.File, string, error)       { return attachWith(f, false) }
func attachDirect(f *os.File) (*os.File, string, error) { return attachWith(f, true) }

// mountLoop mounts the image f, a filesystem of type fs, on dir (nosuid,
// nodev, with options opts), through a loop device (by on) that goes
// with the last unmount.
func mountLoop(f *os.File, dir, fs, opts string, on func(*os.File) (*os.File, string, error)) error {
	loop, dev, err := on(f)
	if err != nil {
		return err
	}
	defer loop.Close()
	if err := unix.Mount(dev, dir, fs, unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev, dir, err)
	}
	return nil
}

// clone makes dst share every extent of src (FICLONE), or says why not:
// ErrNoClone where the filesystem cannot.
func clone(dst, src *os.File) error {
	err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOTTY):
		return fmt.Errorf("%w (%s: %v)", ErrNoClone, src.Name(), err)
	}
	return fmt.Errorf("share the extents of %s: %w", src.Name(), err)
}

// attachWith puts the image f on a free loop device, released when its
// last user (the mount) goes; direct, the device reads and writes the
// image directly (O_DIRECT, in 4 KiB blocks) where the filesystem under
// it allows, buffered where it does not.
func attachWith(f *os.File, direct bool) (*os.File, string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, "", fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		lf, err := os.OpenFile(dev, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// No devtmpfs to make its node: make it.
			if merr := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(7, uint32(n)))); merr != nil && !errors.Is(merr, os.ErrExist) {
				return nil, "", fmt.Errorf("%s: %w", dev, merr)
			}
			lf, err = os.OpenFile(dev, os.O_RDWR, 0)
		}
		if err != nil {
			return nil, "", err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if direct {
			cfg.Size = 4096
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		}
		err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		if direct && errors.Is(err, unix.EINVAL) {
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(lf.Fd()), &cfg)
		}
		if errors.Is(err, unix.EBUSY) { // another took it first
			lf.Close()
			continue
		}
		if err != nil {
			lf.Close()
			return nil, "", fmt.Errorf("%s: %w", dev, err)
		}
		return lf, dev, nil
	}
	return nil, "", errors.New("no free loop device after 32 tries")
}

// attachAgain is attachWith for an image that may still be read by a
// loop device (attached): that one, else a new one.
func attachAgain(f *os.File, direct bool) (*os.File, string, error) {
	lf, dev, err := attached(f)
	if err != nil || lf != nil {
		return lf, dev, err
	}
	return attachWith(f, direct)
}

// attached is the loop device that reads f already, if one does: a
// filesystem on it unmounted here and still mounted elsewhere (a copy
// another mount namespace holds). Mounted again, it is the same
// filesystem, where a second device would make a second one writing the
// same image (XFS refuses it, as a duplicate UUID; ext4 would corrupt
// the image). A device bound to f that is read-only, reads part of it,
// or is one of two, and one that cannot be asked, are refused: never a
// second device beside one that may read f.
func attached(f *os.File) (*os.File, string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, "", err
	}
	names, _ := filepath.Glob("/sys/block/loop[0-9]*")
	var found *os.File
	var at string
	for _, n := range names {
		dev := "/dev/" + filepath.Base(n)
		lf, err := openLoop(dev, n)
		if err != nil {
			if found != nil {
				found.Close()
			}
			return nil, "", fmt.Errorf("%s: %w (it might read %s: no second device is made)", dev, err, f.Name())
		}
		info, err := unix.IoctlLoopGetStatus64(int(lf.Fd()))
		if errors.Is(err, unix.ENXIO) || err == nil && (info.Device != st.Dev || info.Inode != st.Ino) {
			lf.Close() // unbound, or another image's
			continue
		}
		if err == nil && found == nil && info.Offset == 0 && info.Sizelimit == 0 && info.Flags&unix.LO_FLAGS_READ_ONLY == 0 {
			found, at = lf, dev
			continue
		}
		lf.Close()
		if found != nil {
			found.Close()
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w (it might read %s: no second device is made)", dev, err, f.Name())
		}
		return nil, "", fmt.Errorf("%s reads %s too (read-only, part of it, or a second device): refused, none is made", dev, f.Name())
	}
	return found, at, nil
}

// openLoop opens the loop device dev (sysfs entry sys) to ask it what it
// reads (no write needed: no change event for udev), making its node
// where there is no devtmpfs to have made it.
func openLoop(dev, sys string) (*os.File, error) {
	lf, err := os.Open(dev)
	if !errors.Is(err, os.ErrNotExist) {
		return lf, err
	}
	b, err := os.ReadFile(filepath.Join(sys, "dev"))
	if err != nil {
		return nil, err
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &major, &minor); err != nil {
		return nil, fmt.Errorf("%s: its number %q: %w", sys, b, err)
	}
	if err := unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	return os.Open(dev)
}

// mounted says whether dir is a mount point.
func mounted(dir string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// Release unmounts the volume on dir, where its image is beside it, and
// removes the image; dir itself stays. A volume still in use is
// detached (it goes when its last user does).
func Release(dir string) error {
	img := Image(dir)
	if _, err := os.Lstat(img); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	if mounted(dir) {
		// A volume a process froze (Snapshot) and never thawed, killed in
		// between, would stay frozen in the kernel after its unmount, its
		// loop device held: thawed first (EINVAL where it is not frozen).
		thaw(dir)
		if err := unix.Unmount(dir, 0); err != nil {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", dir, err))
			}
		}
	}
	if len(errs) == 0 {
		if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Attach mounts dir's volume again where its image is beside it and it
// is not mounted (after a restart of the machine), and first the pool it
// lies in (poolOf) where that is not mounted either; it reports whether
// it mounted the volume, making dir again (0700) where only its image is
// left. Where anyone may write, another user could have made dir or its
// image first (a restart emptied the directory): an image or a dir of
// another user's is not this host's volume, and Attach mounts nothing
// and says so by false, with no error (the volume is gone). An image of
// this user's that is not as this host makes one (another name, other
// modes) is an error: it may hold a workspace, to be looked at, not
// taken as gone.
func Attach(dir string) (bool, error) {
	p, err := poolOf(dir)
	if err != nil {
		return false, err
	}
	if p != "" && !mounted(p) {
		if err := MountPool(p); err != nil {
			return false, fmt.Errorf("the pool %s: %w", p, err)
		}
	}
	img := Image(dir)
	if mine, err := mineOrGone(img); err != nil || !mine || mounted(dir) {
		return false, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return false, err
	}
	if Owned(dir) != nil {
		return false, nil // another user's directory: not this host's volume
	}
	f, err := openOurs(img)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// One Attach of an image at a time (two recoveries of one record):
	// the second finds it mounted.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return false, err
	}
	if mounted(dir) {
		return false, nil
	}
	if err := mountLoop(f, dir, "ext4", "", func(f *os.File) (*os.File, string, error) { return attachAgain(f, false) }); err != nil {
		return false, err
	}
	return true, nil
}

// mineOrGone says whether path is a file of this user's (true), or is
// not there or another user's (false: not this host's). An error: it is
// this user's, and not a regular file with one name (a link, another
// kind), or cannot be read.
func mineOrGone(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if int(st.Uid) != os.Geteuid() {
		return false, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		return false, fmt.Errorf("%s: this host's, but not as it makes one (mode %#o, %d names): refused", path, st.Mode, st.Nlink)
	}
	return true, nil
}

// Of is the usage of the volume on dir; ok is false where dir is not a
// volume's mount point.
func Of(dir string) (Usage, bool, error) {
	if _, err := os.Lstat(Image(dir)); err != nil || !mounted(dir) {
		return Usage{}, false, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, false, err
	}
	bs := int64(st.Bsize)
	return Usage{Size: int64(st.Blocks) * bs, Used: int64(st.Blocks-st.Bfree) * bs, Avail: int64(st.Bavail) * bs,
		Files: int64(st.Files), FilesFree: int64(st.Ffree)}, true, nil
}
