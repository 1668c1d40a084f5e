package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/tier"
)

// Blobs is the content-addressed store: objects kept under their BLAKE3
// address. Put is idempotent; Get returns an object only if it hashes to
// its address.
type Blobs interface {
	PutBlob(a addr.Addr, b []byte) error
	Blob(a addr.Addr) ([]byte, error)
	HasBlob(a addr.Addr) bool
}

var _ Blobs = (*Store)(nil)

// ErrCorrupt is wrapped by a blob store's error for a blob whose bytes do
// not hash to its address (every backend checks on reading).
var ErrCorrupt = errors.New("blob does not hash to its address")

// Index lists a store's runs and records without reading them
// (internal/index: SQLite). It is derived: Reindex rebuilds it from the
// run directories. A backend that keeps runs elsewhere (PostgreSQL, S3)
// implements it and Blobs, and passes internal/store/storetest.
type Index interface {
	// PutRun adds or replaces a run's row; CommitRun makes a pending
	// one final; DropRun removes one.
	PutRun(IndexedRun) error
	CommitRun(addr.Addr) error
	DropRun(addr.Addr) error
	// Runs lists rows newest first, then by id; EachRun gives them to
	// f in that order as it reads them (an error from f ends it).
	Runs(RunQuery) ([]IndexedRun, error)
	EachRun(q RunQuery, f func(IndexedRun) error) error
	PutRecord(IndexedRecord) error
	// Records lists record rows by id; RecordsComplete and
	// RebuildRecords are Complete and Rebuild for them.
	Records() ([]IndexedRecord, error)
	RecordsComplete() (bool, error)
	RebuildRecords(recs []IndexedRecord, since time.Time) error
	// Complete says every committed run has a row; Rebuild replaces
	// the run rows written before since (when the scan that found them
	// began), at once, and makes it so.
	Complete() (bool, error)
	Rebuild(runs []IndexedRun, since time.Time) error
	Close() error
}

// IndexedRun is a run's row: its summary, and whether it is pending (the
// row was made before the rename that commits the run).
type IndexedRun struct {
	ID      addr.Addr
	Started time.Time
	Tier    tier.Tier
	Status  attest.Status
	Exit    *int
	Entry   string
	Damaged string
	Pending bool
}

// RunQuery selects runs: at most Limit (0: all), with ids starting with
// Prefix (lower-case hex; "": all).
type RunQuery struct {
	Limit  int
	Prefix string
}

// IndexedRecord is a run record's row.
type IndexedRecord struct {
	ID       string
	Phase    string
	Head     addr.Addr
	Segments int
	Executed int
	Updated  time.Time
}

// IndexPath is where a state directory's index is.
func (s *Store) IndexPath() string { return s.Path("index.db") }

// Indexed returns the run row a sealed run gets, from its attestation's
// claim and its unit's entry.
func Indexed(a *attest.Attestation, entry string) IndexedRun {
	c := a.Claim
	r := IndexedRun{ID: a.Addr, Tier: c.Tier.Chosen, Status: c.Outcome.Status, Exit: c.Outcome.ExitCode, Entry: entry}
	r.Started, _ = time.Parse(attest.TimeLayout, c.Started)
	return r
}

// IndexBefore and IndexAfter bracket the rename that commits a run
// directory (doc of package index); nil does nothing. A failure of the index costs only its completeness: it is
// marked for a rebuild, and the run is stored either way.
func (s *Store) IndexBefore(r *IndexedRun) {
	if s.Index == nil || r == nil {
		return
	}
	r.Pending = true
	if err := s.Index.PutRun(*r); err != nil {
		s.indexFailed(err)
	}
}

func (s *Store) IndexAfter(r *IndexedRun) {
	if s.Index == nil || r == nil {
		return
	}
	if err := s.Index.CommitRun(r.ID); err != nil {
		s.indexFailed(err)
	}
}

// indexFailed marks the index for a rebuild: the next listing scans.
func (s *Store) indexFailed(err error) {
	os.WriteFile(s.Path("index.stale"), []byte(err.Error()+"\n"), 0o600)
}

// ListRuns lists runs newest first: from the index where it is
// complete (pending rows checked against their directories), else by a
// scan of the run directories (Scan), which then rebuilds the index.
func (s *Store) ListRuns(q RunQuery) ([]Summary, error) {
	var out []Summary
	err := s.EachRun(q, func(r Summary) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// EachRun calls f with each run ListRuns would list, in its order, as
// the index gives them: a long list is never held whole.
func (s *Store) EachRun(q RunQuery, f func(Summary) error) error {
	each := func(all []Summary, err error) error {
		if err != nil {
			return err
		}
		for _, r := range filterRuns(all, q) {
			if err := f(r); err != nil {
				return err
			}
		}
		return nil
	}
	if s.Index == nil {
		return each(s.Scan())
	}
	if _, err := os.Stat(s.Path("index.stale")); err == nil {
		return each(s.Reindex())
	}
	if ok, err := s.Index.Complete(); err != nil || !ok {
		return each(s.Reindex())
	}
	runs := s.Path("runs") + string(filepath.Separator)
	n, rows := 0, 0
	var found []addr.Addr
	err := s.Index.EachRun(q, func(r IndexedRun) error {
		rows++
		dir := runs + r.ID.Hex()
		if r.Pending {
			// Committed by a process that died before it said so, or
			// not committed (yet, or ever).
			if _, err := os.Lstat(dir); err != nil {
				return nil
			}
			found = append(found, r.ID) // made final below: not while the rows are open
		}
		n++
		return f(Summary{ID: r.ID, Dir: dir, Tier: r.Tier, Status: r.Status, Exit: r.Exit, Started: r.Started, Entry: r.Entry, Damaged: r.Damaged})
	})
	for _, id := range found {
		s.Index.CommitRun(id)
	}
	if err != nil {
		return fmt.Errorf("the index %s: %w (sandbox runs --scan rebuilds it)", s.IndexPath(), err)
	}
	if q.Limit > 0 && rows == q.Limit && n < q.Limit {
		// Pending rows were left out: the rest of the page is further on.
		skip := n
		err := s.EachRun(RunQuery{Limit: q.Limit * 2, Prefix: q.Prefix}, func(r Summary) error {
			if skip > 0 {
				skip--
				return nil
			}
			if n >= q.Limit {
				return errStop
			}
			n++
			return f(r)
		})
		if errors.Is(err, errStop) {
			return nil
		}
		return err
	}
	return nil
}

var errStop = errors.New("stop")

// Reindex rebuilds the index from the run directories (a scan), and
// returns what the scan found.
func (s *Store) Reindex() ([]Summary, error) {
	since := time.Now()
	os.Remove(s.Path("index.stale")) // a failure from here on marks it again
	all, err := s.Scan()
	if err != nil || s.Index == nil {
		return all, err
	}
	rows := make([]IndexedRun, 0, len(all))
	for _, r := range all {
		if r.ID.IsZero() {
			continue // a directory whose name is no run id
		}
		rows = append(rows, IndexedRun{ID: r.ID, Started: r.Started, Tier: r.Tier, Status: r.Status, Exit: r.Exit, Entry: r.Entry, Damaged: r.Damaged})
	}
	if err := s.Index.Rebuild(rows, since); err != nil {
		s.indexFailed(err)
		return all, nil
	}
	return all, nil
}

// filterRuns applies q to a scan's list (newest first).
func filterRuns(all []Summary, q RunQuery) []Summary {
	if q.Prefix != "" {
		var m []Summary
		for _, r := range all {
			if strings.HasPrefix(filepath.Base(r.Dir), q.Prefix) {
				m = append(m, r)
			}
		}
		all = m
	}
	if q.Limit > 0 && len(all) > q.Limit {
		all = all[:q.Limit]
	}
	return all
}

// sortRuns orders a list newest first, then by id.
func sortRuns(out []Summary) {
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.After(out[j].Started)
		}
		return out[i].ID.Hex() < out[j].ID.Hex()
	})
}

// ErrNoIndex is wrapped when an index cannot be opened.
var ErrNoIndex = errors.New("no index")

// Collectable is a Blobs whose objects can be listed and removed: what a
// cluster's collector sweeps (docs/cluster.md, "Collecting the blob
// store"). The three stores a cluster can keep its objects in (a
// directory, PostgreSQL, an S3 bucket) implement it, and pass
// storetest.Collectable.
type Collectable interface {
	Blobs
	// EachBlob calls f with the address of every blob stored, in no
	// particular order; what is not named as a blob is (a put's
	// temporary file, another program's object) is left out. An error
	// from f ends it, and is its error.
	EachBlob(ctx context.Context, f func(addr.Addr) error) error
	// RemoveBlobContext removes the blob at a, within ctx (a remove
	// that ctx ended may still land); one not stored is no error.
	RemoveBlobContext(ctx context.Context, a addr.Addr) error
}

var _ Collectable = (*Store)(nil)

// EachBlob calls f with the address of every blob in the store's blobs/
// directory (Collectable): each file named by 64 lowercase hex digits.
func (s *Store) EachBlob(ctx context.Context, f func(addr.Addr) error) error {
	d, err := os.Open(s.Path("blobs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			a, perr := addr.Parse(addr.Prefix + n)
			if perr != nil || a.Hex() != n {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := f(a); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// RemoveBlobContext is RemoveBlob, refused once ctx has ended
// (Collectable).
func (s *Store) RemoveBlobContext(ctx context.Context, a addr.Addr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.RemoveBlob(a)
}
