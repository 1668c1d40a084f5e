package live

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// virtfsMode is the extended attribute an S5 read-write share (QEMU's
// mapped-xattr) keeps a file's mode in, as the guest sees it: the host's
// file keeps QEMU's own (0600 for a file), never the guest's.
const virtfsMode = "user.virtfs.mode"

// foldGuestModes gives each file of an S5 workspace, on the host, the
// permission bits its guest sees (set-id and sticky bits never: they
// stay in the attribute), so that a capture records the workspace as the
// guest had it. The VM is paused and its shares let go when it runs.
// Links are not followed; nothing is read outside ws.
func foldGuestModes(ws string) error {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return err
	}
	defer root.Close()
	var errs []error
	fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		f, err := root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		defer f.Close()
		var b [8]byte
		n, err := unix.Fgetxattr(int(f.Fd()), virtfsMode, b[:])
		if errors.Is(err, unix.ENODATA) || n != 4 {
			return nil // no mode of the guest's: the host's is what it sees
		}
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		mode := binary.LittleEndian.Uint32(b[:4]) & 0o777
		if fi, err := f.Stat(); err == nil && uint32(fi.Mode().Perm()) != mode {
			if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	return errors.Join(errs...)
}
