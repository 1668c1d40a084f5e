package chain

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/zeebo/blake3"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/reject"
)

// Step is one link of a chain: BLAKE3(head ‖ entry).
func Step(head addr.Addr, entry []byte) addr.Addr {
	h := hashers.Get().(*blake3.Hasher)
	h.Reset()
	h.Write(head[:])
	h.Write(entry)
	var out addr.Addr
	h.Sum(out[:0])
	hashers.Put(h)
	return out
}

var hashers = sync.Pool{New: func() any { return blake3.New() }}

// Genesis is BLAKE3 of a domain tag and what the log binds, concatenated.
func Genesis(domain string, bound ...[]byte) addr.Addr {
	h := blake3.New()
	h.Write([]byte(domain))
	for _, b := range bound {
		h.Write(b)
	}
	var out addr.Addr
	h.Sum(out[:0])
	return out
}

// MaxEntry bounds one entry's bytes.
const MaxEntry = 1 << 20

// Split cuts a log's bytes into its entries. A final fragment without its
// newline is no entry: torn is its length. An empty line, or a line over
// MaxEntry, is refused, naming the line.
func Split(b []byte) (entries [][]byte, torn int, err error) {
	n := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return entries, len(b), nil
		}
		n++
		switch {
		case i == 0:
			return nil, 0, reject.New(reject.Malformed, fmt.Sprintf("line %d", n), "an empty line: a log holds one entry per line")
		case i > MaxEntry:
			return nil, 0, reject.New(reject.Invalid, fmt.Sprintf("line %d", n), "an entry of %d bytes, over the bound of %d", i, MaxEntry)
		}
		entries = append(entries, b[:i:i])
		b = b[i+1:]
	}
	return entries, 0, nil
}

// Read returns the entries of the log at path, and the length of a torn
// final fragment. A missing file is the genesis: no entries, no error.
func Read(path string) (entries [][]byte, torn int, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	entries, torn, err = Split(b)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return entries, torn, nil
}

// LockWait is how long OpenFile waits for a log another holds.
const LockWait = 2 * time.Second

// BusyError is a log another writer holds open.
type BusyError struct{ Path string }

func (e *BusyError) Error() string {
	return e.Path + ": another process is appending to this log"
}

// Unavailable makes it the unavailable category.
func (e *BusyError) Unavailable() bool { return true }

// File is a log opened for appending.
type File struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64 // bytes of whole entries
}

// OpenFile opens the log at path for appending, and returns its entries
// for the caller to replay before it appends: the file is made (and its
// directory synced) if missing, held against other writers, and a torn
// final fragment is cut.
func OpenFile(path string) (*File, [][]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	// One writer at a time: a second would interleave its entries with
	// a head it never replayed. A lock held for a moment is waited for: a
	// child this process forks shares the lock until it execs (the file
	// is close-on-exec), so a log closed and opened again may find it
	// held for that long.
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Since(start) > LockWait {
			f.Close()
			return nil, nil, &BusyError{Path: path}
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	entries, torn, err := Split(b)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	lf := &File{path: path, f: f, size: int64(len(b) - torn)}
	if torn > 0 {
		if err := lf.cut(); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	if len(b) == 0 {
		if err := safefile.SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	return lf, entries, nil
}

// cut truncates the file to its whole entries and syncs it.
func (l *File) cut() error {
	if err := l.f.Truncate(l.size); err != nil {
		return fmt.Errorf("%s: cut back to its whole entries: %w", l.path, err)
	}
	return l.f.Sync()
}

// Append writes entry and a newline at the end of the log and fsyncs it.
// The entry is acknowledged only when Append returns nil; otherwise the
// file is cut back to what it held.
func (l *File) Append(entry []byte) error { return l.AppendBatch([][]byte{entry}) }

// AppendBatch writes entries, each with its newline, at the end of the
// log in one write and fsyncs them once: a group commit. They are
// acknowledged together only when it returns nil; otherwise the file is
// cut back to what it held, and none of them is.
func (l *File) AppendBatch(entries [][]byte) error { return l.appendBatch(entries, true) }

// AppendUnsynced writes entry and a newline at the end of the log
// without an fsync: for a log whose every entry can be made again from
// another, synced one (a record's seals). After a crash it may have lost
// its last entries, or end in bytes that were never written (a
// filesystem that does not order data before metadata); its reader
// handles both. On an error the file is cut back to what it held.
func (l *File) AppendUnsynced(entry []byte) error {
	return l.appendBatch([][]byte{entry}, false)
}

func (l *File) appendBatch(entries [][]byte, sync bool) error {
	n := 0
	for _, e := range entries {
		if len(e) == 0 || len(e) > MaxEntry || bytes.IndexByte(e, '\n') >= 0 {
			return reject.New(reject.Invalid, l.path, "an entry is 1 to %d bytes on one line", MaxEntry)
		}
		n += len(e) + 1
	}
	if n == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("%s: %w", l.path, os.ErrClosed)
	}
	lines := make([]byte, 0, n)
	for _, e := range entries {
		lines = append(append(lines, e...), '\n')
	}
	if _, err := l.f.WriteAt(lines, l.size); err != nil {
		l.cut()
		return fmt.Errorf("%s: append: %w", l.path, err)
	}
	if sync {
		crash.At(crash.LogWritten)
		if err := l.f.Sync(); err != nil {
			l.cut()
			return fmt.Errorf("%s: append: %w", l.path, err)
		}
		crash.At(crash.LogSynced)
	}
	l.size += int64(len(lines))
	return nil
}

// Sync makes what the log holds durable (entries a process that ended
// wrote and never synced, say).
func (l *File) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("%s: %w", l.path, os.ErrClosed)
	}
	return l.f.Sync()
}

// Close closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// VerifyCited replays a whole log's bytes from genesis, each entry
// checked by check, and checks that it had every head in cited (what the
// records citing the log say it was): a log reset or cut short does not
// (head-mismatch, saying it is the head citer cites). A final fragment
// without its newline is refused here (truncated): a verifier is given
// a log at rest. It returns the head and the number of entries.
func VerifyCited(b []byte, genesis addr.Addr, check func(entry []byte) error, cited []addr.Addr, citer string) (addr.Addr, int, error) {
	entries, torn, err := Split(b)
	if err != nil {
		return addr.Addr{}, 0, err
	}
	if torn > 0 {
		return addr.Addr{}, 0, reject.New(reject.Truncated, fmt.Sprintf("entry %d", len(entries)+1), "%d bytes without their newline", torn)
	}
	head := genesis
	seen := map[addr.Addr]bool{head: true}
	for i, e := range entries {
		if err := check(e); err != nil {
			return head, len(entries), fmt.Errorf("entry %d: %w", i+1, err)
		}
		head = Step(head, e)
		seen[head] = true
	}
	for _, c := range cited {
		if !seen[c] {
			return head, len(entries), reject.New(reject.HeadMismatch, "", "%s %s, which this log never had", citer, c)
		}
	}
	return head, len(entries), nil
}
