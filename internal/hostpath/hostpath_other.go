//go:build !linux

package hostpath

// Object is a host object reached without following a link.
type Object struct {
	Path string
	ID   ID
}

// FD is -1: there is no object.
func (o *Object) FD() int { return -1 }

// IsDir reports false.
func (o *Object) IsDir() bool { return false }

// Release returns -1.
func (o *Object) Release() int { return -1 }

// Close does nothing.
func (o *Object) Close() error { return nil }

// Open is not supported here.
func Open(p string) (*Object, error) { return nil, ErrNotSupported }

// Check refuses everything: nothing was reached.
func (g Guard) Check(o *Object, writable bool) error { return ErrNotSupported }

// PlaceOf is not supported here.
func PlaceOf(what, path string) (Place, error) { return Place{}, ErrNotSupported }

// NewGuard is not supported here.
func NewGuard(state string, executables ...string) (Guard, error) { return Guard{}, ErrNotSupported }
