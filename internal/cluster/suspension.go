package cluster

import (
	"fmt"

	"github.com/opensubstrate/sandbox/addr"
)

// suspension is what a host that suspends a sandbox into the cluster
// signs of it, kept in the sandbox's row beside the columns it names
// (by_host, sig): the sandbox, its owner (as ownerText keeps it), its
// record's head, its bundle, and its object list (zero: none). A host
// that takes the sandbox, and a collection, act on those columns only
// where the signature of the host the row names holds: a row edited by
// hand (another bundle, owner, head or list) is refused, never acted on
// (docs/cluster.md, "Who is trusted"). The state columns (host, state,
// fence) are the cluster's arbitration, not a host's word, and are not
// signed.
type suspension struct {
	id, by, owner         string
	head, bundle, objects addr.Addr
}

func (s suspension) message() []byte {
	objects := ""
	if !s.objects.IsZero() {
		objects = string(s.objects[:])
	}
	return fields("sandbox.cluster.suspension/1", s.id, s.by, s.owner, string(s.head[:]), string(s.bundle[:]), objects)
}

// check says whether sig, of the host whose key is pub (as its row
// keeps it; nil where the row names no host the cluster has), signs s;
// where not, the error wraps ErrEdited and says what does not hold.
func (s suspension) check(pub, sig []byte) error {
	switch {
	case s.by == "" || len(sig) == 0:
		return fmt.Errorf("sandbox %s: its row's suspension is signed by no host (edited by hand, or written by a version before signed suspensions): %w", s.id, ErrEdited)
	case pub == nil:
		return fmt.Errorf("sandbox %s: its row's suspension names host %s, which the cluster does not have: %w", s.id, s.by, ErrEdited)
	}
	if !signedBy(s.by, pub, s.message(), sig) {
		return fmt.Errorf("sandbox %s: its row is not as host %s signed it (its owner, head, bundle or object list changed): %w", s.id, s.by, ErrEdited)
	}
	return nil
}

// signedRow is the suspension a sandbox's row keeps (its columns as
// read, pub the key of the host by_host names, nil where the cluster has
// none), where it is as that host signed it; else an error that wraps
// ErrEdited, saying what does not hold.
func signedRow(id, owner, by string, head, bundle, objects, pub, sig []byte) (suspension, error) {
	s := suspension{id: id, by: by, owner: owner}
	var err error
	if s.head, err = addrOf(id, "head", head); err != nil {
		return s, err
	}
	if s.bundle, err = addrOf(id, "bundle", bundle); err != nil {
		return s, err
	}
	if s.objects, err = addrOf(id, "object list", objects); err != nil {
		return s, err
	}
	if s.head.IsZero() || s.bundle.IsZero() {
		return s, fmt.Errorf("sandbox %s: its row names no head or no bundle: %w", id, ErrEdited)
	}
	return s, s.check(pub, sig)
}

// addrOf is b as an address: zero where b is empty, an error (ErrEdited)
// where it is neither empty nor an address's length.
func addrOf(id, what string, b []byte) (addr.Addr, error) {
	var a addr.Addr
	switch len(b) {
	case 0:
	case len(a):
		copy(a[:], b)
	default:
		return a, fmt.Errorf("sandbox %s: its row's %s is %d bytes, not an address: %w", id, what, len(b), ErrEdited)
	}
	return a, nil
}
