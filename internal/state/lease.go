package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A Lease is one process's claim on the temporary things it makes: run
// directories being written, the roots and cgroups of its runs, scratch
// directories. Each such thing is named with the lease's ID (Name), and
// the lease is an exclusive flock on leases/ID.lock, which the kernel
// drops when the process ends, however it ends. So whether a leftover's
// maker is alive is never guessed: its lease is locked, or it is not.
type Lease struct {
	ID   string
	dir  *Dir
	f    *os.File
	next atomic.Uint64
}

// leaseDir holds the lease files.
const leaseDir = "leases"

// Lease takes a new lease for this process. The lease file is made under
// a temporary name, locked, and only then renamed into place, so a lease
// file under its real name is always locked while its maker lives.
func (d *Dir) Lease() (*Lease, error) {
	dir := d.Path(leaseDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b[:])
	tmp := filepath.Join(dir, ".new-"+id)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: lease: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("state: lease: %w", err)
	}
	fmt.Fprintf(f, "pid %d\n", os.Getpid())
	if err := os.Rename(tmp, filepath.Join(dir, id+".lock")); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("state: lease: %w", err)
	}
	return &Lease{ID: id, dir: d, f: f}, nil
}

// Name returns a new name for a temporary thing of this lease: prefix,
// the lease ID and a counter, e.g. "run-3f2a…-7".
func (l *Lease) Name(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, l.ID, l.next.Add(1))
}

// Close ends the lease: its file is removed, then unlocked. What it
// named should be gone by then; if it is not, nothing will collect it.
func (l *Lease) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := os.Remove(filepath.Join(l.dir.Path(leaseDir), l.ID+".lock"))
	l.f.Close()
	l.f = nil
	return err
}

// DeadLease is the lease of a process that has ended, held (locked) by
// the collector until Release.
type DeadLease struct {
	ID   string
	path string
	f    *os.File
}

// Owns reports whether name was made under this lease (see Lease.Name).
func (d *DeadLease) Owns(name string) bool {
	return strings.Contains(name, "-"+d.ID+"-")
}

// Release removes the dead lease's file, once what it named is gone.
func (d *DeadLease) Release() error {
	err := os.Remove(d.path)
	unlockClose(d.f)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}

// Unlock lets the dead lease go without removing it.
func (d *DeadLease) Unlock() { unlockClose(d.f) }

// unlockClose releases f's lock, then closes it. Closing alone is not
// enough: a child this process forks meanwhile holds a copy of the
// descriptor until it executes its program, and the lock with it, so
// that another collector (or this one, a moment later) would take the
// dead lease for a live one.
func unlockClose(f *os.File) {
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	f.Close()
}

// DeadLeases locks and returns the leases whose makers have ended. A lease
// file that another collector removed meanwhile is skipped; temporary
// files of leases that never got their name are removed.
func (d *Dir) DeadLeases() ([]*DeadLease, error) {
	dir := d.Path(leaseDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var out []*DeadLease
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			continue // gone meanwhile
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // its maker lives
			continue
		}
		if id, ok := strings.CutSuffix(name, ".lock"); ok && !strings.HasPrefix(name, ".") {
			// Still there under its name after the lock: dead.
			if _, err := os.Stat(p); err != nil {
				unlockClose(f)
				continue
			}
			out = append(out, &DeadLease{ID: id, path: p, f: f})
			continue
		}
		// A lease that died before it was named: it named nothing.
		os.Remove(p)
		unlockClose(f)
	}
	return out, nil
}

// MkdirNamed makes a directory (mode 0700) under parent for something a
// run uses for a while, named by name (a Lease's Name), so that a
// collector can tell whose it is; with name nil, a random name, which
// nothing collects.
func MkdirNamed(parent, prefix string, name func(prefix string) string) (string, error) {
	if name == nil {
		return os.MkdirTemp(parent, prefix+"-")
	}
	p := filepath.Join(parent, name(prefix))
	return p, os.Mkdir(p, 0o700)
}
