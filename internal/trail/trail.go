package trail

import (
	"context"
	"fmt"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Domain is the genesis's domain tag.
const Domain = "sandbox.audit/1"

// Genesis is head₀.
func Genesis() addr.Addr { return chain.Genesis(Domain) }

// Entry is one sovereign run.
type Entry struct {
	Run      addr.Addr `json:"run"`      // its attestation
	Locality string    `json:"locality"` // the place it was pinned to
}

// Log is a trail kept in a file.
type Log struct {
	mu   sync.Mutex
	f    *chain.File
	head addr.Addr
	n    int
}

// Open replays the trail at path (a missing file is the genesis) and
// holds it for appending.
func Open(path string) (*Log, error) {
	f, entries, err := chain.OpenFile(path)
	if err != nil {
		return nil, err
	}
	head, err := replay(entries, nil)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Log{f: f, head: head, n: len(entries)}, nil
}

func parse(b []byte) (Entry, error) {
	var e Entry
	if err := jcs.Unmarshal(b, &e); err != nil {
		return e, err
	}
	if e.Run.IsZero() {
		return e, reject.New(reject.MissingField, "run", "the all-zero address names nothing")
	}
	if e.Locality == "" {
		return e, reject.New(reject.MissingField, "locality", "an S7 run is pinned somewhere")
	}
	return e, nil
}

// replay is the head after entries, calling each with every head from
// head₀ on.
func replay(entries [][]byte, each func(addr.Addr)) (addr.Addr, error) {
	head := Genesis()
	if each != nil {
		each(head)
	}
	for i, b := range entries {
		if _, err := parse(b); err != nil {
			return head, fmt.Errorf("entry %d: %w", i+1, err)
		}
		head = chain.Step(head, b)
		if each != nil {
			each(head)
		}
	}
	return head, nil
}

// Trail is an audit trail S7 runs are appended to, one at a time: this
// host's file (Log), or a cluster's, shared by its hosts
// (internal/cluster). Hold gives the head a run seals as its audit_prev
// and keeps every other writer out until Release; Append, between them,
// adds the run's entry and returns the new head.
type Trail interface {
	Hold(ctx context.Context) (addr.Addr, error)
	Append(run addr.Addr, locality string) (addr.Addr, error)
	Release()
}

var _ Trail = (*Log)(nil)

// Hold is Lock, as a Trail.
func (l *Log) Hold(context.Context) (addr.Addr, error) { return l.Lock(), nil }

// Release is Unlock, as a Trail.
func (l *Log) Release() { l.Unlock() }

// EntryBytes is a run's entry as its line: canonical, checked.
func EntryBytes(run addr.Addr, locality string) ([]byte, error) {
	b, err := jcs.Marshal(Entry{Run: run, Locality: locality})
	if err != nil {
		return nil, err
	}
	if _, err := parse(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Lock holds the trail for one S7 run: the head it seals as audit_prev,
// then Append, then Unlock. No other run's entry comes between.
func (l *Log) Lock() addr.Addr {
	l.mu.Lock()
	return l.head
}

// Unlock releases the trail.
func (l *Log) Unlock() { l.mu.Unlock() }

// Append writes the run's entry and fsyncs it, then advances the head;
// the caller holds Lock.
func (l *Log) Append(run addr.Addr, locality string) (addr.Addr, error) {
	b, err := EntryBytes(run, locality)
	if err != nil {
		return addr.Addr{}, err
	}
	if err := l.f.Append(b); err != nil {
		return addr.Addr{}, err
	}
	l.head = chain.Step(l.head, b)
	l.n++
	return l.head, nil
}

// Len is the number of entries.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Close releases the file.
func (l *Log) Close() error { return l.f.Close() }

// Verify replays a trail's bytes and checks that it reaches every head
// in cited (the audit_prev values of the host's S7 attestations): a
// trail reset or cut short does not (head-mismatch).
func Verify(b []byte, cited []addr.Addr) (addr.Addr, int, error) {
	return chain.VerifyCited(b, Genesis(), func(e []byte) error { _, err := parse(e); return err }, cited, "an attestation cites audit_prev")
}
