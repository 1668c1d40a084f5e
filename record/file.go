package record

import (
	"bytes"
	"errors"
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
	// repaired says what opening cut from the seals, if anything.
	repaired string
}

// Repaired says what opening the record cut from its seals file and
// sealed again (a crash's torn or unwritten tail), or "" if nothing: for
// the host's log.
func (f *File) Repaired() string { return f.repaired }

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
// seals the entries they do not cover. Seals are written without an
// fsync (each can be made again from the record, which is synced), so
// after a crash the file may have lost its last lines, or hold, from
// some line on, bytes that were never written there (a filesystem that
// does not order data before metadata: zeros, a block of another file's,
// a later block kept and an earlier one lost). So the seals are cut from
// the first that is unreadable, or of another record or entry, and the
// entries from there are sealed again (the same bytes, for what was
// sealed before: Ed25519 is deterministic). A readable seal of this
// record and entry that signs another head is refused: the record is
// not what its host sealed.
func (f *File) openSeals(entries [][]byte) error {
	path := SealPath(f.path)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	heads, _, err := Heads(entries)
	if err != nil {
		return err
	}
	keep, whole := 0, 0 // bytes, and seals, of the good prefix
	for rest, n := b, 1; n <= len(entries); n++ {
		line, after, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			break // a torn fragment, or the end
		}
		s, err := ParseSeal(line)
		if err != nil || s.Record != f.sealer.ID || s.Entry != n {
			break // never written there: cut from here
		}
		if s.Head != heads[n-1] {
			return fmt.Errorf("%s: %w", path, reject.New(reject.HeadMismatch, fmt.Sprintf("seal %d", n), "it seals entry %d of %s at %s; the record's entry %d is at %s", s.Entry, s.Record, s.Head, n, heads[n-1]))
		}
		rest = after
		keep, whole = len(b)-len(rest), n
	}
	if keep < len(b) {
		// A torn or unwritten tail, or seals of entries the record does
		// not have (an import cut short before its record took them).
		if err := safefile.Write(path, b[:keep], 0o600); err != nil {
			return err
		}
		f.repaired = fmt.Sprintf("%d bytes cut from the seals after seal %d (torn or never written there, or of entries the record does not have); entries %d to %d sealed again", len(b)-keep, whole, whole+1, len(entries))
	}
	sl, seals, err := chain.OpenFile(path)
	if err != nil {
		return err
	}
	if len(seals) != whole {
		sl.Close()
		return fmt.Errorf("%s: changed while it was opened", path) // another writer: the record's lock excludes it
	}
	f.seals, f.sealed = sl, whole
	if whole < len(entries) {
		// The entries about to be sealed (and synced) are durable first:
		// a process that ended between writing one and syncing it left
		// it only in the page cache.
		if err := f.log.Sync(); err != nil {
			return err
		}
	}
	for n := f.sealed + 1; n <= len(entries); n++ {
		if err := f.seal(n, heads[n-1], true); err != nil {
			return err
		}
	}
	return nil
}

// seal appends the seal of entry n at head, fsynced where sync says.
func (f *File) seal(n int, head addr.Addr, sync bool) error {
	b, err := NewSeal(f.sealer.Key, f.sealer.ID, n, head).Bytes()
	if err != nil {
		return err
	}
	if sync {
		err = f.seals.Append(b)
	} else {
		err = f.seals.AppendUnsynced(b)
	}
	if err != nil {
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
		// The entry is acknowledged: it is in the record. Its seal is
		// written, not synced: one lost to a crash, or one that does
		// not take, is made when the record is next opened (an entry
		// with no seal does not leave this host: export refuses).
		f.seal(f.st.Segments+1, f.st.Head, false)
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
