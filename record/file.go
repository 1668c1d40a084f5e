package record

import (
	"fmt"
	"os"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// File is a record kept in a file: replayed from its genesis when it is
// opened, each segment fsynced before its head is taken. A File opened
// with a Sealer also seals each entry it appends (SealPath).
type File struct {
	mu     sync.Mutex
	path   string
	log    *chain.File
	st     State
	named  named // the runs and previews its segments named
	sealer *Sealer
	seals  *chain.File
	sealed int // entries sealed
}

// Sealer seals a record's entries as a host appends them: the host's key
// and the id of the sandbox whose record it is.
type Sealer struct {
	Key key.Private
	ID  string
}

// Create opens the record at path for unit under grants, beginning it if
// there is none. An existing record under another unit or grant set is
// refused (splice): a continuation with other grants is a new run.
func Create(path string, unit, grants addr.Addr) (*File, error) {
	return CreateSealed(path, unit, grants, nil)
}

// CreateSealed is Create, the genesis and every entry appended after it
// sealed by s (nil: none).
func CreateSealed(path string, unit, grants addr.Addr, s *Sealer) (*File, error) {
	hb, err := jcs.Marshal(Header{Record: Domain, Unit: unit, Grants: grants})
	if err != nil {
		return nil, err
	}
	f, err := open(path, hb, s)
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
	return OpenSealed(path, nil)
}

// OpenSealed is Open, every entry appended from here sealed by s (nil:
// none). Entries the record holds without a seal (a host that ended
// between an entry and its seal, or a record kept before seals were)
// are sealed by s now: only the host that keeps a record appends to it.
func OpenSealed(path string, s *Sealer) (*File, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	return open(path, nil, s)
}

// open opens the log at path, beginning it with header when it is empty
// and header is given, and replays it.
func open(path string, header []byte, s *Sealer) (*File, error) {
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
	f := &File{path: path, log: log, st: st, named: rs, sealer: s}
	if s != nil {
		if err := f.openSeals(entries); err != nil {
			log.Close()
			return nil, err
		}
	}
	return f, nil
}

// openSeals opens the seals beside the record, checks those there and
// seals the entries they do not cover.
func (f *File) openSeals(entries [][]byte) error {
	path := SealPath(f.path)
	sl, seals, err := chain.OpenFile(path)
	if err != nil {
		return err
	}
	if len(seals) > len(entries) {
		// Seals of entries the record does not have: written before a
		// record that never took its new entries (an import cut short).
		sl.Close()
		var b []byte
		for _, l := range seals[:len(entries)] {
			b = append(append(b, l...), '\n')
		}
		if err := safefile.Write(path, b, 0o600); err != nil {
			return err
		}
		if sl, seals, err = chain.OpenFile(path); err != nil {
			return err
		}
	}
	heads, _, err := Heads(entries)
	if err != nil {
		sl.Close()
		return err
	}
	for i, b := range seals {
		s, err := ParseSeal(b)
		if err == nil && (s.Record != f.sealer.ID || s.Entry != i+1 || s.Head != heads[i]) {
			err = reject.New(reject.HeadMismatch, fmt.Sprintf("seal %d", i+1), "it seals entry %d of %s at %s; the record's entry %d is at %s", s.Entry, s.Record, s.Head, i+1, heads[i])
		}
		if err != nil {
			sl.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	f.seals, f.sealed = sl, len(seals)
	for n := f.sealed + 1; n <= len(entries); n++ {
		if err := f.seal(n, heads[n-1]); err != nil {
			return err
		}
	}
	return nil
}

// seal appends the seal of entry n at head.
func (f *File) seal(n int, head addr.Addr) error {
	b, err := NewSeal(f.sealer.Key, f.sealer.ID, n, head).Bytes()
	if err != nil {
		return err
	}
	if err := f.seals.Append(b); err != nil {
		return err
	}
	f.sealed = n
	return nil
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
	if err := f.named.check(seg, n); err != nil {
		return addr.Addr{}, err
	}
	if err := f.log.Append(b); err != nil {
		return addr.Addr{}, err
	}
	if err := f.st.Apply(seg, b); err != nil {
		return addr.Addr{}, err // Check passed: cannot happen
	}
	f.named.add(seg, n)
	if f.sealer != nil && f.sealed == f.st.Segments {
		// The entry is acknowledged: it is in the record. A seal that
		// does not take is made when the record is next opened (an
		// entry with no seal does not leave this host: export refuses).
		f.seal(f.st.Segments+1, f.st.Head)
	}
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
func (f *File) Close() error {
	if f.seals != nil {
		f.seals.Close()
	}
	return f.log.Close()
}
