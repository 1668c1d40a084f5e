//go:build linux

package hostpath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Object is a host object reached without following a link: an open
// O_PATH descriptor and what it was checked by.
type Object struct {
	Path   string
	ID     ID
	Mode   uint32 // st_mode
	UID    uint32
	GID    uint32
	FSType int64
	fd     int
	chain  []ID // "/" first, the object last
}

// FD is the object's O_PATH descriptor; it stays open until Close.
func (o *Object) FD() int { return o.fd }

// IsDir reports whether the object is a directory.
func (o *Object) IsDir() bool { return o.Mode&unix.S_IFMT == unix.S_IFDIR }

// Release hands the descriptor to the caller, who closes it; the object
// no longer holds it.
func (o *Object) Release() int {
	fd := o.fd
	o.fd = -1
	return fd
}

// Close closes the descriptor.
func (o *Object) Close() error {
	if o.fd < 0 {
		return nil
	}
	err := unix.Close(o.fd)
	o.fd = -1
	return err
}

func idOf(st *unix.Stat_t) ID { return ID{Dev: uint64(st.Dev), Ino: st.Ino} }

// Open walks p (absolute and clean) from "/" one component at a time,
// following no link, and returns the object it names. A component that is
// a symbolic link (or a magic link of /proc) is refused with a
// *LinkError naming it.
func Open(p string) (*Object, error) {
	if err := clean(p); err != nil {
		return nil, err
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: "/", Err: err}
	}
	chain := []ID{idOf(&st)}
	prefix := ""
	if p != "/" {
		for _, name := range strings.Split(p[1:], "/") {
			prefix += "/" + name
			// One name, O_NOFOLLOW: nothing is followed, not even a
			// magic link; a link comes back as itself.
			nfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: prefix, Err: err}
			}
			fd = nfd
			if err := unix.Fstat(fd, &st); err != nil {
				unix.Close(fd)
				return nil, &os.PathError{Op: "stat", Path: prefix, Err: err}
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				buf := make([]byte, 4096)
				n, _ := unix.Readlinkat(fd, "", buf)
				unix.Close(fd)
				return nil, &LinkError{Path: p, At: prefix, Target: string(buf[:max(n, 0)])}
			}
			chain = append(chain, idOf(&st))
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "statfs", Path: p, Err: err}
	}
	return &Object{Path: p, ID: idOf(&st), Mode: st.Mode, UID: st.Uid, GID: st.Gid, FSType: int64(sfs.Type), fd: fd, chain: chain}, nil
}

// kernelFS names the file system types that are kernel interfaces, never
// storage.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "procfs", unix.SYSFS_MAGIC: "sysfs", unix.DEVPTS_SUPER_MAGIC: "devpts",
	unix.CGROUP_SUPER_MAGIC: "cgroupfs", unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpffs",
	0x62656570: "configfs", unix.EFIVARFS_MAGIC: "efivarfs", unix.PSTOREFS_MAGIC: "pstore",
	unix.BINFMTFS_MAGIC: "binfmt_misc", unix.NSFS_MAGIC: "nsfs", 0x65735543: "fusectl",
	unix.SELINUX_MAGIC: "selinuxfs", unix.SMACK_MAGIC: "smackfs", 0x19800202: "mqueue",
}

// Check refuses an object the guard forbids: a kernel interface, anything
// but a directory or a regular file, one of the guard's private places or
// anything containing or inside one, and, for a writable grant, one of
// its executables or anything containing one.
func (g Guard) Check(o *Object, writable bool) error {
	refuse := func(format string, args ...any) error {
		return &RefusedError{Path: o.Path, Reason: fmt.Sprintf(format, args...)}
	}
	if name, ok := kernelFS[o.FSType]; ok {
		return refuse("it is on %s, a kernel interface, not storage: a run has its own /proc and /dev and no /sys", name)
	}
	for _, k := range g.Kernel {
		if o.ID.Dev == k.Dev {
			return refuse("it is on the host's %s, a kernel interface, not storage", k.Path)
		}
	}
	switch o.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG:
	default:
		return refuse("it is not a directory or a regular file (mode %#o)", o.Mode&unix.S_IFMT)
	}
	for _, pl := range g.Private {
		if err := pl.check(o, refuse); err != nil {
			return err
		}
	}
	if writable {
		for _, pl := range g.Executables {
			if len(pl.Chain) > 0 && o.ID == pl.Chain[0] {
				return refuse("it is %s, which the host runs: it may not be granted writable", pl.What)
			}
			if contains(pl.Chain[1:], o.ID) {
				return refuse("it contains %s, which the host runs: it may not be granted writable", pl.What)
			}
		}
	}
	return nil
}

func (pl Place) check(o *Object, refuse func(string, ...any) error) error {
	if len(pl.Chain) == 0 {
		return nil
	}
	switch {
	case o.ID == pl.Chain[0]:
		return refuse("it is %s, which no run may reach", pl.What)
	case contains(o.chain, pl.Chain[0]):
		return refuse("it lies inside %s, which no run may reach", pl.What)
	case contains(pl.Chain[1:], o.ID):
		return refuse("it contains %s, which no run may reach", pl.What)
	}
	return nil
}

func contains(ids []ID, id ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// PlaceOf is the place at path (links followed: the host names its own
// places) with the identities of every directory above it.
func PlaceOf(what, path string) (Place, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return Place{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	pl := Place{What: what}
	for i := 0; i < 4096; i++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return Place{}, &os.PathError{Op: "stat", Path: path, Err: err}
		}
		id := idOf(&st)
		if len(pl.Chain) > 0 && pl.Chain[len(pl.Chain)-1] == id {
			break // "/" is its own parent
		}
		pl.Chain = append(pl.Chain, id)
		up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			if len(pl.Chain) == 1 { // a file: its parent is its directory
				return Place{}, &os.PathError{Op: "open", Path: path + "/..", Err: err}
			}
			return pl, nil
		}
		fd = up
	}
	unix.Close(fd)
	return pl, nil
}

// NewGuard is the guard of a host whose state directory is state and
// whose binaries are executables: every one that exists is guarded, and
// the host's /dev when it is a file system of its own. An empty state
// (a host that keeps none) guards no state directory.
func NewGuard(state string, executables ...string) (Guard, error) {
	var g Guard
	if state != "" {
		pl, err := PlaceOf("sandbox's state directory "+state, state)
		if err != nil {
			return Guard{}, fmt.Errorf("hostpath: the state directory: %w", err)
		}
		g.Private = append(g.Private, pl)
	}
	for _, e := range executables {
		if e == "" {
			continue
		}
		pl, err := placeOfFile("sandbox's own binary "+e, e)
		if err != nil {
			continue
		}
		g.Executables = append(g.Executables, pl)
	}
	var root, dev unix.Stat_t
	if unix.Stat("/", &root) == nil && unix.Stat("/dev", &dev) == nil && dev.Dev != root.Dev {
		g.Kernel = append(g.Kernel, KernelDev{Path: "/dev", Dev: uint64(dev.Dev)})
	}
	return g, nil
}

// placeOfFile is PlaceOf for a file: the file, then its directory's chain.
func placeOfFile(what, path string) (Place, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Place{}, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return PlaceOf(what, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Place{}, err
	}
	dir, err := PlaceOf(what, filepath.Dir(real))
	if err != nil {
		return Place{}, err
	}
	return Place{What: what, Chain: append([]ID{idOf(&st)}, dir.Chain...)}, nil
}
