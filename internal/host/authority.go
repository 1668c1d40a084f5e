package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// AuthorityLog is the decision log's file in the state directory: every
// grant refused to a principal (internal/authority).
const AuthorityLog = "authority.jsonl"

// MaxRead bounds a host file read to make a unit for a principal other
// than the operator (a module, a program).
const MaxRead = 1 << 30

// LocalOwner is the owner of the host's own user: the unix socket's
// callers and the CLI in-process.
const LocalOwner = "local"

// PoolOwnerPrefix begins the owner of a warm pool's ready sandboxes: no
// caller's owner can be one (a NUL is in no token's owner, and local is
// "local").
const PoolOwnerPrefix = "\x00pool:"

// IsPoolOwner says whether owner is a pool's (its ready sandboxes').
func IsPoolOwner(owner string) bool { return strings.HasPrefix(owner, PoolOwnerPrefix) }

// Workspace is a live sandbox's workspace and whose it is.
type Workspace struct {
	Owner, Path string
}

// isOperator says whether owner is the machine's owner: the local user
// (the service's own uid at its socket, or the CLI in-process), or a
// warm pool the operator configured.
func isOperator(owner string) bool {
	return owner == "" || owner == LocalOwner || IsPoolOwner(owner)
}

// Principal is owner's authority: its own policy (the operator's for
// the local owner; Policies[owner], else authority.Default, for any
// other), then the narrowings ctx carries.
func (h *Host) Principal(ctx context.Context, owner string) authority.Principal {
	var base authority.Policy
	switch {
	case isOperator(owner):
		if owner == "" {
			owner = LocalOwner
		}
		base = authority.Operator()
		if h.OperatorPolicy != nil {
			base = *h.OperatorPolicy
		}
	default:
		p, ok := h.Policies[owner]
		if !ok {
			p = authority.Default()
		}
		base = p
	}
	pr := authority.Principal{Name: owner, Policies: []authority.Policy{base}}
	for _, n := range authority.Narrowings(ctx) {
		pr = pr.Narrowed(n)
	}
	return pr
}

// authorize is the one check before anything runs: owner (held to the
// narrowings ctx carries) may be given what a asks, or the refusal,
// logged. Every principal may grant its own sandboxes' workspaces; no
// principal but the operator may grant another's, or a directory that
// holds one.
func (h *Host) authorize(ctx context.Context, owner string, a authority.Ask) error {
	p := h.Principal(ctx, owner)
	a.Own = h.workspacesOf(p.Name)
	a.Readable = SystemDirs
	err := authority.Check(p, a)
	if err == nil && !isOperator(p.Name) {
		err = h.foreignWorkspace(p.Name, a)
	}
	if err != nil {
		h.refused(err)
	}
	return err
}

// workspacesOf are the workspaces of owner's live sandboxes.
func (h *Host) workspacesOf(owner string) []string {
	var out []string
	for _, w := range h.workspaces() {
		if w.Owner == owner {
			out = append(out, w.Path)
		}
	}
	return out
}

func (h *Host) workspaces() []Workspace {
	if h.Workspaces == nil {
		return nil
	}
	return h.Workspaces()
}

// foreignWorkspace refuses a storage grant that is, is inside, or holds
// the workspace of a sandbox owner does not own.
func (h *Host) foreignWorkspace(owner string, a authority.Ask) error {
	ws := h.workspaces()
	for _, st := range a.Grants.Storage {
		for _, w := range ws {
			if w.Owner == owner {
				continue
			}
			if grant.Within(w.Path, st.Path) || grant.Within(st.Path, w.Path) {
				return &authority.DeniedError{Principal: owner, Action: a.Action, Grant: fmt.Sprintf("fs:%s:%s", st.Path, st.Mode), Rule: "workspaces",
					Why: fmt.Sprintf("%s is, is inside, or holds the workspace of a sandbox that is not its own", st.Path)}
			}
		}
	}
	return nil
}

// refused keeps a refusal in the decision log and the service's log.
func (h *Host) refused(err error) {
	var de *authority.DeniedError
	if !errors.As(err, &de) {
		return
	}
	h.Logger().Warn("denied", "principal", de.Principal, "action", de.Action, "grant", de.Grant, "rule", de.Rule, "policy", de.Policy)
	if h.Store == nil {
		return
	}
	if _, lerr := authority.Append(h.Store.Path(AuthorityLog), authority.DecisionOf(de, h.Now())); lerr != nil {
		h.Logger().Error("the decision log did not take a refusal", "err", lerr)
	}
}

// Authorize checks that owner (held to ctx's narrowings) may be given
// what a asks, as every entry point does before anything runs.
func (h *Host) Authorize(ctx context.Context, owner string, a authority.Ask) error {
	return h.authorize(ctx, owner, a)
}

// Now is the time by the host's clock (Clock, else time.Now).
func (h *Host) Now() time.Time {
	if h.Clock != nil {
		return h.Clock()
	}
	return time.Now()
}

// ImageChecker is whether owner (held to ctx's narrowings) may run in an
// image root filesystem, for CommandLine.Image and ResolveImage: nil for
// the operator, else the policy's images rule alone. It logs nothing:
// ResolveImage asks it of every image and logs the one refusal that
// mattered.
func (h *Host) ImageChecker(ctx context.Context, owner, action string) func(addr.Addr) error {
	if isOperator(owner) && len(authority.Narrowings(ctx)) == 0 {
		return nil
	}
	return func(root addr.Addr) error {
		return authority.CheckImage(h.Principal(ctx, owner), authority.Ask{Action: action, Image: root})
	}
}

// Reader is how the host reads a file a unit is made from for owner: nil
// for the operator (any regular file), else a reader that reads only
// what owner may grant, or its own workspaces, reached without following
// a link (a run may have planted one), bounded by MaxRead; or a program
// of the system directories every run sees, whose links are followed
// (/bin/sh, python3) but which is read only where what they lead to is
// in the system directories too, or owner may read it there.
func (h *Host) Reader(ctx context.Context, owner, action string) func(string) ([]byte, error) {
	if isOperator(owner) && len(authority.Narrowings(ctx)) == 0 {
		return nil
	}
	return func(path string) ([]byte, error) {
		p := h.Principal(ctx, owner)
		check := func(path string) error {
			err := h.mayRead(p, action, path)
			if err != nil {
				h.refused(err)
			}
			return err
		}
		if err := check(path); err != nil {
			return nil, err
		}
		if inSystemDirs(path) {
			return readSystem(path, check)
		}
		o, err := hostpath.Open(path)
		if err != nil {
			return nil, err
		}
		defer o.Close()
		return readReached(o.FD(), path)
	}
}

// readReached reads the file at path that fd (O_PATH) reached, up to
// MaxRead: only once it is known to be a regular file, so that a FIFO a
// run made does not hold the reader until something writes to it, nor
// a device act on its open.
func readReached(fd int, path string) ([]byte, error) {
	self := fmt.Sprintf("/proc/self/fd/%d", fd)
	if fi, err := os.Stat(self); err != nil || !fi.Mode().IsRegular() {
		return nil, &ProgramError{Err: fmt.Errorf("%s is not a regular file", path)}
	}
	f, err := os.Open(self)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, path)
}

// Looker says whether owner may learn that a host file is there: nil for
// the operator (any), else where owner may read it (Reader), which a
// refusal does not log (a PATH is looked through one directory after
// another).
func (h *Host) Looker(ctx context.Context, owner, action string) func(string) error {
	if isOperator(owner) && len(authority.Narrowings(ctx)) == 0 {
		return nil
	}
	return func(path string) error {
		return h.mayRead(h.Principal(ctx, owner), action, path)
	}
}

// mayRead says whether p may have the host read path for it: where it
// could grant it (authority.CheckReads), and, as for a grant
// (foreignWorkspace), never in the workspace of a sandbox that is not
// its own, whatever root of its policy holds it.
func (h *Host) mayRead(p authority.Principal, action, path string) error {
	if err := authority.CheckReads(p, authority.Ask{Action: action, Reads: []string{path}, Own: h.workspacesOf(p.Name), Readable: SystemDirs}); err != nil {
		return err
	}
	if isOperator(p.Name) {
		return nil
	}
	for _, w := range h.workspaces() {
		if w.Owner != p.Name && grant.Within(w.Path, path) {
			return &authority.DeniedError{Principal: p.Name, Action: action, Grant: "program:" + path, Rule: "workspaces",
				Why: fmt.Sprintf("the host would read %s to make the run, which is in the workspace of a sandbox that is not its own", path)}
		}
	}
	return nil
}

// readBounded reads f, the file at path, refusing one over MaxRead.
func readBounded(f *os.File, path string) ([]byte, error) {
	b, err := readAll(f, MaxRead)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxRead {
		return nil, &LimitError{What: fmt.Sprintf("%s is over %d bytes", path, MaxRead)}
	}
	return b, nil
}

// inSystemDirs says whether p is in one of the host's system directories
// (SystemDirs), by its name.
func inSystemDirs(p string) bool {
	for _, d := range SystemDirs {
		if grant.Within(d, p) {
			return true
		}
	}
	return false
}
