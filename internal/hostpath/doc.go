// Package hostpath reaches objects of the host's file system for storage
// grants without ever following a link.
//
// A grant names a path; a guest of an earlier run may have planted a
// symbolic link anywhere along it. Open walks the path from "/" one
// component at a time (openat with O_PATH|O_NOFOLLOW on a single name,
// which follows nothing, magic links included) and refuses, naming it, the
// first component that is a link. What it returns is an open descriptor of
// the object reached: the caller mounts or opens beneath that descriptor,
// so that what was checked is what is used.
//
// A Guard says what no grant may reach: the object itself must not be a
// kernel interface (procfs, sysfs, the host's /dev, cgroupfs...), must
// not be, lie inside or contain sandbox's state directory, and, when it
// is writable, must not be or contain sandbox's own binaries. Places are
// compared by device and inode, so a bind mount or a second path to the
// same directory is caught as well.
//
// Invariants: no function here follows a symbolic link; every error that
// refuses a path names the component or the place that made it refuse;
// every refusal is Invalid (a bad grant, not a failure of the host).
//
// Executors reach grants through grant.Reach, which is Open and Check.
// The package depends on golang.org/x/sys/unix only: the S1 helper
// (internal/native/s1init) walks grants with it inside the run's mount
// namespace before it mounts them, and the VM jail its writable
// directory.
package hostpath
