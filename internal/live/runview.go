package live

import (
	"archive/tar"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"io"

	"fmt"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/verify"
)

// RunView is a sealed run as its caller may see it: verified against
// this host's key, its attestation and receipt.
type RunView struct {
	ID          addr.Addr
	Dir         string
	Verified    bool
	Problems    []string // each record that did not verify, and why
	Attestation *attest.Attestation
	Receipt     *receipt.Receipt
}

// RunFor is run ref (its full address) for owner, verified: the local
// owner sees every run of this host; any other owner only the runs its
// sandboxes' records cite (another's run is not found, as if it were
// not there).
func (h *Manager) RunFor(owner, ref string) (*RunView, error) {
	a, err := addr.Parse(ref)
	if err != nil {
		return nil, &host.InvalidError{Err: fmt.Errorf("run %q: %w", ref, err)}
	}
	dir := h.Store.Path("runs", a.Hex())
	notFound := fmt.Errorf("run %s: %w", a, os.ErrNotExist)
	if _, err := os.Stat(dir); err != nil {
		return nil, notFound
	}
	if owner != "" && owner != host.LocalOwner && !h.noted(owner, a) && !h.cites(owner, a) {
		return nil, notFound
	}
	v := &RunView{ID: a, Dir: dir, Verified: true}
	trust := key.NewTrust(h.Key.Public())
	for _, r := range (&verify.Verifier{Trust: trust}).Attestation(filepath.Join(dir, verify.FileAttestation)) {
		if r.Err != nil {
			v.Verified = false
			v.Problems = append(v.Problems, fmt.Sprintf("%s (%s): %v", filepath.Base(r.Path), r.Kind, r.Err))
		}
	}
	if at, err := host.OpenRun(dir); err == nil {
		v.Attestation = at
	}
	if b, err := os.ReadFile(filepath.Join(dir, verify.FileReceipt)); err == nil {
		v.Receipt, _ = receipt.Open(b, key.Trust{}) // its figures; trust is decided above
	}
	return v, nil
}

// NoteOwner keeps whose run a is, where a principal other than the
// host's own user made it through the service (a one-shot run, an
// exec): RunFor shows it to that principal, even once the sandbox it
// ran in is gone. A failure is logged: the run stays the host's own
// user's to see.
func (h *Manager) NoteOwner(a addr.Addr, owner string) {
	if owner == "" || owner == host.LocalOwner {
		return
	}
	dir := h.Store.Path("owners")
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = safefile.Write(filepath.Join(dir, a.Hex()), []byte(owner), 0o600)
	}
	if err != nil {
		h.Logger().Warn("whose run it is was not kept", "run", a, "err", err)
	}
}

// noted says NoteOwner kept run a as owner's.
func (h *Manager) noted(owner string, a addr.Addr) bool {
	b, err := os.ReadFile(h.Store.Path("owners", a.Hex()))
	return err == nil && string(b) == owner
}

// cites says whether one of owner's sandbox records cites run a.
func (h *Manager) cites(owner string, a addr.Addr) bool {
	for _, id := range h.recordIDs() {
		if !h.owns(id, owner) {
			continue
		}
		entries, _, err := h.readRecord(id)
		if err != nil || len(entries) == 0 {
			continue
		}
		for _, e := range entries[1:] {
			if seg, err := record.ParseSegment(e); err == nil && seg.Kind == record.Executed && seg.Attestation == a {
				return true
			}
		}
	}
	return false
}

// RunBundle writes run ref's directory to w as a tar of runs/HEX/NAME
// entries (the run entries of a bundle, docs/spec/bundle.md): what a
// client verifies offline with the host's key. Seen by whom RunFor
// shows it to.
func (h *Manager) RunBundle(owner, ref string, w io.Writer) error {
	v, err := h.RunFor(owner, ref)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := h.putRun(tarPut(tw), v.ID); err != nil {
		return err
	}
	return tw.Close()
}
