package hostpath

import (
	"errors"
	"fmt"
	"path/filepath"
)

// ErrNotSupported is wrapped where the host has no way to walk paths
// without following links (not Linux).
var ErrNotSupported = errors.New("hostpath: not supported on this platform")

// ID is a file system object's identity: its device and inode.
type ID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// Place is a host object no grant may reach, with the identities of the
// directories above it (its own first, "/" last), so that a grant that
// contains it is recognised whatever path names it.
type Place struct {
	// What names the place in errors, e.g. "sandbox's state directory
	// /var/lib/sandbox".
	What  string `json:"what"`
	Chain []ID   `json:"chain"`
}

// Guard is what no storage grant may reach.
type Guard struct {
	// Private places may not be granted, contain a grant or lie inside
	// one, in any mode: the state directory (host key, caches, runs).
	Private []Place `json:"private,omitempty"`
	// Executables may not be granted writable, or lie inside a writable
	// grant: sandbox's own binaries, which the host runs again.
	Executables []Place `json:"executables,omitempty"`
	// Kernel are the identities of the roots of the host's kernel
	// interfaces that share a file system type with ordinary storage
	// (the host's /dev, a tmpfs): an object on the same device is refused.
	Kernel []KernelDev `json:"kernel,omitempty"`
}

// KernelDev is a device holding a kernel interface, by where it is mounted.
type KernelDev struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
}

// LinkError refuses a path one of whose components is a link.
type LinkError struct {
	Path   string // the path asked for
	At     string // the prefix of Path that is a link
	Target string // what the link says, when it could be read
}

func (e *LinkError) Error() string {
	to := ""
	if e.Target != "" {
		to = fmt.Sprintf(" (to %s)", e.Target)
	}
	if e.At == e.Path {
		return fmt.Sprintf("%s is a symbolic link%s: storage grants never follow a link; grant the real path", e.Path, to)
	}
	return fmt.Sprintf("%s: %s is a symbolic link%s: storage grants never follow a link; grant the real path", e.Path, e.At, to)
}

// Invalid reports true: the grant names a link.
func (e *LinkError) Invalid() bool { return true }

// RefusedError refuses an object a Guard forbids.
type RefusedError struct {
	Path   string
	Reason string
}

func (e *RefusedError) Error() string { return e.Path + ": " + e.Reason }

// Invalid reports true: the grant reaches what no grant may.
func (e *RefusedError) Invalid() bool { return true }

// clean reports whether p is absolute and clean.
func clean(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return &RefusedError{Path: p, Reason: "not an absolute, clean path"}
	}
	return nil
}
