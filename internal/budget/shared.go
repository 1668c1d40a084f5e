package budget

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Shared is a ledger's log where more than one host appends (a cluster's
// database: internal/cluster's Chain): one writer at a time, each entry
// signed by its writer and checked when read back.
//
// A shared ledger takes the log for every change (Hold), applies what
// other hosts appended since it last looked with the rules Verify
// replays (Since), decides, and appends what it decided before it lets
// the log go (Append commits and releases): so its decisions are made
// against every entry before them, whichever host made those, and no
// reservation takes a grant past its ceiling across hosts. The caller
// serializes its calls (the ledger's mutex does).
type Shared interface {
	// Hold takes the log, waiting while another writer holds it, and
	// returns its size and head.
	Hold(ctx context.Context) (size uint64, head addr.Addr, err error)
	// Since is the log's entries after the first have, in order (while
	// held, as the hold sees them).
	Since(ctx context.Context, have uint64) ([][]byte, error)
	// Append appends lines after the held head, commits and releases
	// the hold, returning the new head.
	Append(lines ...[]byte) (addr.Addr, error)
	// Release gives the hold up without appending.
	Release()
	// Bytes is the whole log as a ledger file holds it (one entry a
	// line), every entry checked, and its head: what Verify replays.
	Bytes(ctx context.Context) ([]byte, addr.Addr, error)
}

// Genesis is a ledger's head before any entry, the head a Shared log
// starts from.
func Genesis() addr.Addr { return chain.Genesis(Domain) }

// SharedWait bounds each call a shared ledger makes to its log.
const SharedWait = 90 * time.Second

// OpenShared opens the ledger kept in sh, replaying every entry with the
// rules of §7, the first entry that breaks one refused with its number.
// A shared ledger has no signed heads file: its log's head is the
// database's, and every entry is signed by the host that appended it.
// Every host sharing it must trust the same roots: an entry admitted
// under a root this host does not trust stops it (the error says so).
//
// seen is a file of this host's own where it keeps the longest log it
// has seen (its size and head, fsynced at each change it commits or
// reads): a log that does not extend it (cut back, or rewritten, by
// someone who can write the database but holds no host key) is refused
// from then on, saying it was rolled back. A host that never saw the
// longer log cannot tell (docs/cluster.md).
func OpenShared(sh Shared, roots key.Trust, clock func() time.Time, seen string) (*Ledger, error) {
	if clock == nil {
		clock = time.Now
	}
	mark, err := readSeen(seen)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), SharedWait)
	defer cancel()
	entries, err := sh.Since(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("budget: the shared ledger: %w", err)
	}
	st, err := replay(entries, roots, mark)
	if err != nil {
		return nil, fmt.Errorf("budget: the shared ledger: %w%s", err, rolledBack(err))
	}
	l := &Ledger{path: "the shared ledger", clock: clock, sh: sh, st: st, seen: seen,
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	close(l.stopped)
	if len(mark) > 0 {
		l.seenSize, l.seenHead = mark[0].size, mark[0].head
	}
	if err := l.setDurable(); err != nil {
		return nil, err
	}
	return l, nil
}

// readSeen reads the longest log a host saw, as a signed head of its own
// (none where it saw none).
func readSeen(path string) ([]signed, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("budget: the shared ledger's mark: %w", err)
	}
	var size uint64
	var hex string
	if _, err := fmt.Sscanf(string(b), "%d %s\n", &size, &hex); err != nil {
		return nil, fmt.Errorf("budget: the shared ledger's mark %s: %q: %w", path, b, err)
	}
	head, err := addr.Parse(hex)
	if err != nil {
		return nil, fmt.Errorf("budget: the shared ledger's mark %s: %w", path, err)
	}
	return []signed{{size: size, head: head}}, nil
}

// rolledBack explains a replay's refusal: a log cut back or rewritten
// under this host's mark, or entries this host's roots do not admit.
func rolledBack(err error) string {
	var r *reject.Error
	if errors.As(err, &r) && r.Code == reject.HeadMismatch {
		return " (the shared ledger does not extend the longest log this host saw: it was cut back or rewritten in the database; this host refuses it until that is explained)"
	}
	return rootsHint(err)
}

// rootsHint adds, to a refusal of another host's entry, what most often
// causes it.
func rootsHint(err error) string {
	var r *reject.Error
	if errors.As(err, &r) && r.Code == reject.UntrustedRoot {
		return " (every host sharing a ledger must trust the same JCP roots)"
	}
	return ""
}

// begin takes the ledger for a change: its mutex and, for a shared
// ledger, the log's hold, with what other hosts appended applied. The
// change ends with finish.
func (l *Ledger) begin() error {
	l.mu.Lock()
	if l.sh == nil {
		return nil
	}
	if l.err != nil {
		l.mu.Unlock()
		return l.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), SharedWait)
	defer cancel()
	size, head, err := l.sh.Hold(ctx)
	if err == nil {
		if err = l.catchUp(ctx); err == nil {
			if s, h := l.st.Head(); s != size || h != head {
				err = reject.New(reject.HeadMismatch, "the shared ledger", "its %d entries replay to %s; the log says %d entries and head %s", s, h, size, head)
				l.stale = true
			}
		}
		if err != nil {
			l.sh.Release()
		}
	}
	if err != nil {
		l.mu.Unlock()
		return fmt.Errorf("budget: %w", err)
	}
	return nil
}

// finish ends a change begun by begin, b what it decided (nil:
// nothing). A file ledger lets go, then waits for b to be durable; a
// shared ledger appends b's lines (committing them) and then lets go.
func (l *Ledger) finish(b *batch) error {
	if l.sh == nil {
		l.mu.Unlock()
		return wait(b)
	}
	defer l.mu.Unlock()
	l.pend = nil
	if b == nil || len(b.lines) == 0 {
		l.sh.Release()
		return nil
	}
	if _, err := l.sh.Append(b.lines...); err != nil {
		// Decided in memory, perhaps not in the log: read it all again
		// before the next change.
		l.stale = true
		return fmt.Errorf("budget: the shared ledger: %w", err)
	}
	if err := l.setDurable(); err != nil {
		return err
	}
	crash.At(crash.BudgetAppended)
	return nil
}

// catchUp applies what other hosts appended to a shared ledger since
// this one last looked (all of it again after a failed append).
func (l *Ledger) catchUp(ctx context.Context) error {
	if l.stale {
		entries, err := l.sh.Since(ctx, 0)
		if err != nil {
			return err
		}
		mark := []signed{{size: l.seenSize, head: l.seenHead}}
		if l.seenSize == 0 {
			mark = nil
		}
		st, err := replay(entries, l.st.trust, mark)
		if err != nil {
			if hint := rolledBack(err); hint != rootsHint(err) {
				l.err = fmt.Errorf("budget: the shared ledger: %w%s", err, hint) // every change refused until it is opened again
				return l.err
			}
			return fmt.Errorf("%w%s", err, rootsHint(err))
		}
		l.st, l.stale = st, false
	} else {
		have, _ := l.st.Head()
		newer, err := l.sh.Since(ctx, have)
		if err != nil {
			return err
		}
		for i, b := range newer {
			e, err := parse(b)
			if err == nil {
				err = l.st.check(e)
			}
			if err != nil {
				return fmt.Errorf("entry %d (appended by another host): %w%s", have+uint64(i)+1, err, rootsHint(err))
			}
			l.st.step(e, b)
		}
	}
	return l.setDurable()
}

// refresh brings a shared ledger's state up to what the log holds, for
// a reading (the caller holds l.mu); a log it cannot reach leaves the
// state as it last saw it.
func (l *Ledger) refresh() {
	if l.sh == nil || l.err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), SharedWait)
	defer cancel()
	l.catchUp(ctx)
}

// setDurable notes a shared ledger's state as what its log holds, and
// keeps it as this host's mark where it is longer than the last.
func (l *Ledger) setDurable() error {
	size, head := l.st.Head()
	l.durMu.Lock()
	l.durSize, l.durHead = size, head
	l.durMu.Unlock()
	if l.seen == "" || size <= l.seenSize {
		return nil
	}
	if err := safefile.Write(l.seen, []byte(fmt.Sprintf("%d %s\n", size, head)), 0o600); err != nil {
		return fmt.Errorf("budget: the shared ledger's mark: %w", err)
	}
	l.seenSize, l.seenHead = size, head
	return nil
}
