package budget

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// signed is one signed head: the log's head after size entries, as the
// note'th note of the heads file says.
type signed struct {
	size uint64
	head addr.Addr
	note int
}

var sigPrefix = []byte("— ")

// splitHeads cuts a heads file into its notes: each its text, a blank
// line, and one or more signature lines ("— NAME SIG"). A final note cut
// short (without a whole signature line) is no note: torn is its length.
func splitHeads(b []byte) (notes [][]byte, torn int, err error) {
	for off := 0; off < len(b); {
		end, ok, err := noteEnd(b, off, len(notes)+1)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return notes, len(b) - off, nil
		}
		notes = append(notes, b[off:end])
		off = end
	}
	return notes, 0, nil
}

// noteEnd is where the note at off ends; ok is false when the file ends
// inside it.
func noteEnd(b []byte, off, n int) (int, bool, error) {
	i := bytes.Index(b[off:], []byte("\n\n"))
	if i < 0 {
		return 0, false, nil
	}
	p, sigs := off+i+2, 0
	for p < len(b) && bytes.HasPrefix(b[p:], sigPrefix) {
		j := bytes.IndexByte(b[p:], '\n')
		if j < 0 {
			return 0, false, nil
		}
		p, sigs = p+j+1, sigs+1
	}
	if sigs > 0 {
		return p, true, nil
	}
	if bytes.HasPrefix(sigPrefix, b[p:]) {
		return 0, false, nil // the file ends inside its first signature line
	}
	return 0, false, reject.New(reject.Malformed, fmt.Sprintf("note %d", n), "its text is followed by a blank line and no signature line")
}

// readHeads reads the signed heads of a heads file, each note's
// signature checked by v (nil: not checked).
func readHeads(b []byte, v *note.Verifier) ([]signed, int, error) {
	notes, torn, err := splitHeads(b)
	if err != nil {
		return nil, 0, err
	}
	out := make([]signed, 0, len(notes))
	for i, n := range notes {
		h, err := readHead(n, v)
		if err != nil {
			return nil, 0, reject.In(fmt.Sprintf("note %d", i+1), err)
		}
		h.note = i + 1
		out = append(out, h)
	}
	return out, torn, nil
}

func readHead(n []byte, v *note.Verifier) (signed, error) {
	text := string(n[:bytes.Index(n, []byte("\n\n"))+1])
	if v != nil {
		var err error
		if text, _, err = note.Open(n, []note.Verifier{*v}); err != nil {
			return signed{}, err
		}
	}
	origin, size, root, ext, err := note.ParseCheckpoint(text)
	switch {
	case err != nil:
		return signed{}, err
	case origin != Domain:
		return signed{}, reject.New(reject.Invalid, "origin", "%q; a ledger head's origin is %s", clip(origin), Domain)
	case len(ext) > 0:
		return signed{}, reject.New(reject.Invalid, "checkpoint", "a ledger head has no extension lines")
	}
	return signed{size: size, head: root}, nil
}

// verifier is pub's note verifier under the ledger's key name.
func verifier(pub key.Public) (*note.Verifier, error) {
	vk, err := note.VerifierKey(Domain, pub)
	if err != nil {
		return nil, err
	}
	v, err := note.ParseVerifierKey(vk)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// heads indexes signed heads by size, to be checked as a replay passes
// each size.
type heads map[uint64][]signed

func indexHeads(hs []signed) heads {
	m := heads{}
	for _, h := range hs {
		m[h.size] = append(m[h.size], h)
	}
	return m
}

// check refuses a head signed after size entries that is not head.
func (m heads) check(size uint64, head addr.Addr) error {
	for _, h := range m[size] {
		if h.head != head {
			return reject.New(reject.HeadMismatch, fmt.Sprintf("heads: note %d", h.note),
				"signed %s as the head after %d entries; the log's is %s: it was rewritten", h.head, size, head)
		}
	}
	return nil
}

// beyond refuses a head signed after more entries than the log has.
func (m heads) beyond(size uint64) error {
	var worst *signed
	for s, hs := range m {
		if s > size && (worst == nil || s > worst.size) {
			worst = &hs[0]
		}
	}
	if worst != nil {
		return reject.New(reject.HeadMismatch, fmt.Sprintf("heads: note %d", worst.note),
			"signed the head after %d entries; the log has %d: it was cut short", worst.size, size)
	}
	return nil
}

// loadHeads reads the heads file at path (missing: none), cutting a
// final note a crash cut short (SignHead never returned it).
func loadHeads(path string, v *note.Verifier) ([]signed, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	hs, torn, err := readHeads(b, v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if torn > 0 {
		if err := cutTo(path, int64(len(b)-torn)); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

func cutTo(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("%s: cut back to its whole notes: %w", path, err)
	}
	return f.Sync()
}

// appendHead appends a note to the heads file at path and fsyncs it (and
// its directory, when it makes the file); a failed write is cut back.
func appendHead(path, n string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err = f.WriteString(n); err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Truncate(st.Size())
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Size() == 0 {
		return safefile.SyncDir(filepath.Dir(path))
	}
	return nil
}
