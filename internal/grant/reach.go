package grant

import "github.com/opensubstrate/sandbox/internal/hostpath"

// Reach is the one way from a storage grant to the host object it names,
// for the host before any executor runs and for every executor when it
// uses the grant: the path (at, where the grant is held at another path
// than its own, such as a continued run's restored workspace; "" for its
// own) walked from "/" one name at a time without following a link
// (hostpath.Open), the object reached checked against guard (never a
// kernel interface, never the state directory nor anything containing or
// inside it, never sandbox's binaries writable), and a directory. The
// caller uses the object it is given (mounts, opens or hands on its
// descriptor), never the path again, and closes it.
//
// Every refusal is a *StorageError naming the grant, wrapping the reason:
// a *hostpath.LinkError naming the link, a *hostpath.RefusedError naming
// the place, or the walk's own error.
func Reach(guard hostpath.Guard, s Storage, at string) (*hostpath.Object, error) {
	if at == "" {
		at = s.Path
	}
	o, err := hostpath.Open(at)
	if err != nil {
		return nil, &StorageError{Grant: s, Err: err}
	}
	if err := guard.Check(o, s.Mode == RW); err != nil {
		o.Close()
		return nil, &StorageError{Grant: s, Err: err}
	}
	if !o.IsDir() {
		o.Close()
		return nil, &StorageError{Grant: s, Err: NotADirectory(s.Path)}
	}
	return o, nil
}

// ReachAll reaches every storage grant (each at remap's path where it
// names one) and lets go of it: the host's check, before any executor
// runs, that every grant of a run may be given at all.
func ReachAll(guard hostpath.Guard, storage []Storage, remap map[string]string) error {
	for _, s := range storage {
		o, err := Reach(guard, s, remap[s.Path])
		if err != nil {
			return err
		}
		o.Close()
	}
	return nil
}
