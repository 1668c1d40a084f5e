package record

import (
	"fmt"
	"os"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/canon"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/reject"
)

// File is a record kept in a file: replayed from its genesis when it is
// opened, each segment fsynced before its head is taken.
type File struct {
	mu   sync.Mutex
	path string
	log  *chain.File
	st   State
	runs runs // the attestations its Executed segments named
}

// Create opens the record at path for unit under grants, beginning it if
// there is none. An existing record under another unit or grant set is
// refused (splice): a continuation with other grants is a new run.
func Create(path string, unit, grants addr.Addr) (*File, error) {
	hb, err := canon.Marshal(Header{Record: Domain, Unit: unit, Grants: grants})
	if err != nil {
		return nil, err
	}
	f, err := open(path, hb)
	if err != nil {
		return nil, err
	}
	if f.st.Header.Unit != unit || f.st.Header.Grants != grants {
		f.Close()
		return nil, reject.New(reject.Splice, path, "the record is of unit %s under grants %s, not of %s under %s: a continuation under other grants is a new run",
			f.st.Header.Unit, f.st.Header.Grants, unit, grants)
	}
	return f, nil
}

// Open replays the record at path from its genesis and holds it for
// appending. A missing file is os.ErrNotExist; one that does not verify
// is its reject error, naming the line.
func Open(path string) (*File, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	return open(path, nil)
}

// open opens the log at path, beginning it with header when it is empty
// and header is given, and replays it.
func open(path string, header []byte) (*File, error) {
	log, entries, err := chain.OpenFile(path) // held, a torn fragment cut
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 && header != nil {
		if err := log.Append(header); err != nil {
			log.Close()
			return nil, err
		}
		entries = [][]byte{header}
	}
	if len(entries) == 0 {
		log.Close()
		return nil, fmt.Errorf("%s: empty, not a record: %w", path, os.ErrNotExist)
	}
	st, rs, err := replay(entries, nil)
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &File{path: path, log: log, st: st, runs: rs}, nil
}

// State is the record as it stands.
func (f *File) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// Append checks seg against the record's rules, writes and fsyncs it,
// and only then advances the head, which it returns.
func (f *File) Append(seg Segment) (addr.Addr, error) {
	b, err := seg.Bytes()
	if err != nil {
		return addr.Addr{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.st.Segments + 1
	if err := f.st.Check(seg); err != nil {
		return addr.Addr{}, err
	}
	if err := f.runs.check(seg, n); err != nil {
		return addr.Addr{}, err
	}
	if err := f.log.Append(b); err != nil {
		return addr.Addr{}, err
	}
	if err := f.st.Apply(seg, b); err != nil {
		return addr.Addr{}, err // Check passed: cannot happen
	}
	f.runs.add(seg, n)
	return f.st.Head, nil
}

// Resume appends the Resumed segment, under the three preconditions of
// seed 000: the record verified from its genesis (it did when it was
// opened, and every append since was checked), the offered snapshot is
// the suspended one by address (snapshot-mismatch), and the resuming
// environment's manifest is the recorded one (manifest-mismatch).
func (f *File) Resume(offered Snapshot, env addr.Addr, idleUJ uint64, provenance string) (addr.Addr, error) {
	f.mu.Lock()
	st := f.st
	f.mu.Unlock()
	if st.Phase == Parked && st.Last.Manifest != env {
		return addr.Addr{}, reject.New(reject.ManifestMismatch, f.path, "the environment here is %s; the run was suspended in %s", env, st.Last.Manifest)
	}
	return f.Append(Segment{Kind: Resumed, Snapshot: offered, IdleUJ: idleUJ, IdleProvenance: provenance})
}

// Close releases the file; the record stays as it is.
func (f *File) Close() error { return f.log.Close() }
