package image

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Open opens p, a path as a run sees it, in the root filesystem at
// root: every symlink on the way, absolute or relative, resolves inside
// root, as it will in the run (openat2 RESOLVE_IN_ROOT), never on the
// host. It opens without waiting (O_NONBLOCK, which a regular file's
// reads ignore): a FIFO in a root does not hold its opener.
func Open(root, p string) (*os.File, error) {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, p, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, p)), nil
}

// Where is the path, as a run sees it, of f, a file Open opened in the
// root filesystem at root: where the symlinks on the way led, which may
// be another directory than the one the path named.
func Where(root string, f *os.File) (string, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	at, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return "", err
	}
	if at == real {
		return "/", nil
	}
	rel, ok := strings.CutPrefix(at, real+"/")
	if !ok || !filepath.IsAbs("/"+rel) || filepath.Clean("/"+rel) != "/"+rel {
		return "", fmt.Errorf("%s: not in the image's root %s (%s)", f.Name(), root, at)
	}
	return "/" + rel, nil
}

// Top is how a run's root is made from the root filesystem at root: the
// top-level directories it binds read-only (as the run sees them), and
// the top-level symlinks it copies. The kernel's own (/proc, /dev, /sys)
// and the run's private /tmp are the run's, never the image's.
func Top(root string) (dirs []string, links map[string]string, err error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, err
	}
	links = map[string]string{}
	for _, e := range ents {
		n := e.Name()
		switch n {
		case "proc", "dev", "sys", "tmp", ".sandbox":
			continue
		}
		switch {
		case e.Type()&os.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join(root, n))
			if err != nil {
				return nil, nil, err
			}
			links[n] = t
		case e.IsDir():
			dirs = append(dirs, "/"+n)
		}
	}
	if len(dirs) == 0 {
		return nil, nil, fmt.Errorf("the root filesystem at %s has no directories", root)
	}
	return dirs, links, nil
}
