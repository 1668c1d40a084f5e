package live

import (
	"fmt"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// grantID is the host object a storage grant's path named when the
// session opened.
type grantID struct {
	path string
	id   hostpath.ID
}

// grantIDs are the host objects g's storage grants name now (as the
// session's init reaches them: hostpath, following no link), taken as
// the session opens: its mounts hold these objects for as long as it
// lives, whatever their paths name later.
func grantIDs(g grant.Set) ([]grantID, error) {
	ids := make([]grantID, len(g.Storage))
	for i, s := range g.Storage {
		o, err := hostpath.Open(s.Path)
		if err != nil {
			return nil, err
		}
		ids[i] = grantID{s.Path, o.ID}
		o.Close()
	}
	return ids, nil
}

// sameGrants refuses an exec in sb where a storage grant's path names
// another host object than the one its session mounted (the directory
// was moved away and another put in its place, by another run given its
// parent): the host would find and read the exec's program in the new
// one while the run executes the old one's, and the unit would name
// bytes that did not run.
func sameGrants(sb *Sandbox) error {
	for _, g := range sb.grantIDs {
		o, err := hostpath.Open(g.path)
		if err == nil {
			if o.ID != g.id {
				err = fmt.Errorf("it is another directory than the one the sandbox was given")
			}
			o.Close()
		}
		if err != nil {
			return &host.InvalidError{Err: fmt.Errorf("sandbox %s: its grant %s: %v: what it runs there is not what the host would read (close it and make it again)", sb.ID, g.path, err)}
		}
	}
	return nil
}
