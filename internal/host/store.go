package host

import (
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
)

// What the run list and a run reference are, from the store.
type Summary = store.Summary

// ErrAmbiguous is wrapped when a run prefix matches several runs.
var ErrAmbiguous = store.ErrAmbiguous

// OpenRun reads a run directory's attestation, unverified (store.OpenRun).
func OpenRun(dir string) (*attest.Attestation, error) { return store.OpenRun(dir) }

// Damaged is the error for a file of a run directory that cannot be used.
func Damaged(dir, file string, err error) error { return store.Damaged(dir, file, err) }

// Runs lists stored runs, newest first (store.Runs).
func (h *Host) Runs() ([]Summary, error) { return h.Store.Runs() }

// Resolve turns a run reference into its directory (store.Resolve).
func (h *Host) Resolve(ref string) (string, error) { return h.Store.Resolve(ref) }
