package image

import "golang.org/x/sys/unix"

// openDir opens directory p as a handle to resolve paths beneath.
func openDir(p string) (int, error) {
	return unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// openDirInRoot opens directory dir beneath rootFD as the root's own
// programs see it: every symlink resolved inside the root (openat2
// RESOLVE_IN_ROOT), none through /proc's magic links or onto another
// mount.
func openDirInRoot(rootFD int, dir string) (int, error) {
	return unix.Openat2(rootFD, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
}

// syncDir flushes the file system that holds dir.
func syncDir(dir string) {
	if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
}
