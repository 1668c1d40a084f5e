package ledger

import (
	"fmt"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Domain is the genesis's domain tag.
const Domain = "sandbox.build-ledger/1"

// Genesis is head₀.
func Genesis() addr.Addr { return chain.Genesis(Domain) }

// Entry is one build.
type Entry struct {
	Input  addr.Addr `json:"input"`  // what it was built from (a manifest)
	Output addr.Addr `json:"output"` // what it made
	Run    addr.Addr `json:"run"`    // the sealed run that made it
}

// Ledger is a build ledger kept in a file.
type Ledger struct {
	mu   sync.Mutex
	f    *chain.File
	head addr.Addr
	n    int
	last map[addr.Addr]Entry // by input: the latest
}

// Open replays the ledger at path (a missing file is the genesis),
// checking every entry, and holds it for appending.
func Open(path string) (*Ledger, error) {
	f, entries, err := chain.OpenFile(path)
	if err != nil {
		return nil, err
	}
	l := &Ledger{f: f, last: map[addr.Addr]Entry{}}
	l.head, err = replay(entries, func(e Entry, _ addr.Addr) { l.last[e.Input] = e })
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l.n = len(entries)
	return l, nil
}

func parse(b []byte) (Entry, error) {
	var e Entry
	if err := jcs.Unmarshal(b, &e); err != nil {
		return e, err
	}
	for _, f := range []struct {
		name string
		a    addr.Addr
	}{{"input", e.Input}, {"output", e.Output}, {"run", e.Run}} {
		if f.a.IsZero() {
			return e, reject.New(reject.MissingField, f.name, "the all-zero address names nothing")
		}
	}
	return e, nil
}

// replay is the head after entries, calling each with every entry and
// the head after it.
func replay(entries [][]byte, each func(Entry, addr.Addr)) (addr.Addr, error) {
	head := Genesis()
	for i, b := range entries {
		e, err := parse(b)
		if err != nil {
			return head, fmt.Errorf("entry %d: %w", i+1, err)
		}
		head = chain.Step(head, b)
		if each != nil {
			each(e, head)
		}
	}
	return head, nil
}

// Append records a build: its line is written and fsynced, and only then
// does the head advance; it returns the head after it (what the build
// cites).
func (l *Ledger) Append(e Entry) (addr.Addr, error) {
	b, err := jcs.Marshal(e)
	if err != nil {
		return addr.Addr{}, err
	}
	if _, err := parse(b); err != nil {
		return addr.Addr{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.f.Append(b); err != nil {
		return addr.Addr{}, err
	}
	l.head = chain.Step(l.head, b)
	l.n++
	l.last[e.Input] = e
	return l.head, nil
}

// Lookup is the latest build recorded from input.
func (l *Ledger) Lookup(input addr.Addr) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.last[input]
	return e, ok
}

// Head is the head now, and the number of entries.
func (l *Ledger) Head() (addr.Addr, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head, l.n
}

// Close releases the file.
func (l *Ledger) Close() error { return l.f.Close() }

// Verify replays a ledger's bytes and checks that it reaches every head
// in cited: a ledger reset or cut short does not (head-mismatch).
func Verify(b []byte, cited []addr.Addr) (addr.Addr, int, error) {
	return chain.VerifyCited(b, Genesis(), func(e []byte) error { _, err := parse(e); return err }, cited, "a build cites ledger head")
}
