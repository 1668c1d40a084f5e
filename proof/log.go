package proof

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/merkle"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// DefaultOrigin is the origin a proof log's checkpoints name unless the
// caller gives another (docs/spec/proof.md §5).
const DefaultOrigin = "sandbox/proof-log"

// Opener opens one cell's bytes (a DSSE envelope) to its predicate. The
// log is given it by its caller: the real one verifies the envelope's
// signature; the log itself checks bytes and Merkle hashes only.
type Opener func(envelope []byte) (*Cell, error)

// KeyName is the name a host signs its proof log's checkpoints under,
// the one its fleets' checkpoints are signed under: "sandbox/" and its
// key's short id.
func KeyName(pub key.Public) string { return "sandbox/" + pub.ID().Short() }

// Log is a proof log replayed: its entries, each a cell's envelope as
// it stands on its line, their opened predicates, and the Merkle leaves
// over them. A Log is a value read from a file at one moment; Append
// writes the file.
type Log struct {
	Origin  string
	Entries [][]byte
	Cells   []*Cell
	leaves  []merkle.Hash
}

// ParseLog replays a log's bytes: one cell envelope per line, each a
// JSON object that open accepts. A final fragment without its newline
// was never acknowledged: it is no entry, and torn says how many bytes
// it holds. An empty line, a line that is not JSON, or an entry open
// refuses is fatal, naming the entry (an entry open refuses is
// proof-log-edited: a cell that is not what was signed; one that is no
// envelope at all stays malformed).
func ParseLog(b []byte, origin string, open Opener) (l *Log, torn int, err error) {
	entries, torn, err := chain.Split(b)
	if err != nil {
		return nil, 0, err
	}
	l = &Log{Origin: origin, Entries: entries, Cells: make([]*Cell, len(entries)), leaves: make([]merkle.Hash, len(entries))}
	for i, e := range entries {
		c, err := replayEntry(e, open)
		if err != nil {
			return nil, 0, fmt.Errorf("entry %d: %w", i, err)
		}
		l.Cells[i] = c
		l.leaves[i] = merkle.LeafHash(e)
	}
	return l, torn, nil
}

// openEntry checks one entry: a JSON object on one line, which open
// accepts.
func openEntry(e []byte, open Opener) (*Cell, error) {
	if len(e) == 0 || e[0] != '{' || !json.Valid(e) {
		return nil, reject.New(reject.Malformed, "", "not a cell's envelope (a JSON object on one line)")
	}
	if open == nil {
		return nil, errors.New("proof: a log opened without an opener")
	}
	c, err := open(e)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, reject.New(reject.Invalid, "", "the opener gave no cell")
	}
	return c, nil
}

// replayEntry opens an entry of a log: one open refuses but that is
// JSON is a cell that is not what was signed (proof-log-edited); one
// that is no envelope at all stays malformed.
func replayEntry(e []byte, open Opener) (*Cell, error) {
	c, err := openEntry(e, open)
	if err != nil && reject.CodeOf(err) != reject.Malformed && open != nil {
		return nil, reject.Wrap(reject.ProofLogEdited, "", err)
	}
	return c, err
}

// ReadLog replays the log at path (a missing file is the empty log). A
// torn final fragment is not an entry and is left out: it was never
// acknowledged. A verifier that wants a log at rest uses VerifyLog.
func ReadLog(path, origin string, open Opener) (*Log, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	l, _, err := ParseLog(b, origin, open)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// Size is the number of entries.
func (l *Log) Size() int { return len(l.Entries) }

// Root is the Merkle tree hash of the first n entries.
func (l *Log) Root(n int) merkle.Hash { return merkle.Root(l.leaves[:n]) }

// Checkpoint is the signed checkpoint of the first n entries, by k
// under KeyName.
func (l *Log) Checkpoint(n int, k key.Private) (string, error) {
	if n < 0 || n > l.Size() {
		return "", fmt.Errorf("proof: a checkpoint of %d entries of a log of %d", n, l.Size())
	}
	text, err := note.Checkpoint(l.Origin, uint64(n), l.Root(n))
	if err != nil {
		return "", err
	}
	return note.Sign(text, KeyName(k.Public()), k)
}

// CheckpointPath is where Append keeps the latest checkpoint of the log
// at path: beside it, ".checkpoint" appended.
func CheckpointPath(path string) string { return path + ".checkpoint" }

// Append adds one cell to the log at path and signs the new checkpoint
// with k: the log is opened under the chain discipline (held against
// other writers, a torn fragment cut, every entry replayed and opened),
// the cell is checked (it opens, and is not in the log already), its
// line written and fsynced; only then is the checkpoint signed and
// written beside the log (CheckpointPath, replaced atomically). An
// envelope written over several lines is compacted to one (its JSON
// whitespace only: a DSSE signature is over the payload, not the
// envelope's layout). It returns the entry's index and the checkpoint.
func Append(path, origin string, cell []byte, open Opener, k key.Private) (int, string, error) {
	e, err := entryOf(cell)
	if err != nil {
		return 0, "", err
	}
	c, err := openEntry(e, open)
	if err != nil {
		return 0, "", reject.In("cell", err)
	}
	f, entries, err := chain.OpenFile(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	l := &Log{Origin: origin, Entries: entries, Cells: make([]*Cell, len(entries)), leaves: make([]merkle.Hash, len(entries))}
	for i, old := range entries {
		c, err := replayEntry(old, open)
		if err != nil {
			return 0, "", fmt.Errorf("%s: entry %d: %w", path, i, err)
		}
		if bytes.Equal(old, e) {
			return 0, "", reject.New(reject.Invalid, "cell", "already in the log at entry %d", i)
		}
		l.Cells[i], l.leaves[i] = c, merkle.LeafHash(old)
	}
	if err := f.Append(e); err != nil {
		return 0, "", err
	}
	l.Entries, l.Cells, l.leaves = append(l.Entries, e), append(l.Cells, c), append(l.leaves, merkle.LeafHash(e))
	cp, err := l.Checkpoint(l.Size(), k)
	if err != nil {
		return 0, "", err
	}
	if err := safefile.Write(CheckpointPath(path), []byte(cp), 0o644); err != nil {
		return 0, "", err
	}
	return l.Size() - 1, cp, nil
}

// entryOf is a cell's bytes as a log line: trailing whitespace cut, and
// an envelope over several lines compacted.
func entryOf(cell []byte) ([]byte, error) {
	e := bytes.TrimRight(cell, " \t\r\n")
	if bytes.ContainsAny(e, "\r\n") {
		var b bytes.Buffer
		if err := json.Compact(&b, e); err != nil {
			return nil, reject.New(reject.Malformed, "cell", "not JSON: %v", err)
		}
		e = b.Bytes()
	}
	if len(e) > chain.MaxEntry {
		return nil, reject.New(reject.Invalid, "cell", "%d bytes, over a log entry's bound of %d", len(e), chain.MaxEntry)
	}
	return e, nil
}
