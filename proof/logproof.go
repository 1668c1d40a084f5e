package proof

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/merkle"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/reject"
)

// MaxCheckpoint bounds a checkpoint's bytes: a few lines and a few
// signatures.
const MaxCheckpoint = 16 << 10

// Checked is a checkpoint opened under trusted keys.
type Checked struct {
	Origin string
	Size   uint64
	Root   merkle.Hash
	By     []string // the trusted signers whose signatures verify
	Signed string   // the checkpoint as signed
}

// OpenCheckpoint opens a signed checkpoint under verifiers and checks
// it names origin. A known key's signature that does not verify is
// proof-log-forged; no trusted signature, untrusted-key; another
// origin, splice.
func OpenCheckpoint(cp []byte, origin string, verifiers []note.Verifier) (Checked, error) {
	if len(cp) > MaxCheckpoint {
		return Checked{}, reject.New(reject.Invalid, "checkpoint", "%d bytes, over the bound of %d", len(cp), MaxCheckpoint)
	}
	text, by, err := note.Open(cp, verifiers)
	if errors.Is(err, reject.Signature) {
		return Checked{}, reject.Wrap(reject.ProofLogForged, "checkpoint", err)
	}
	if err != nil {
		return Checked{}, reject.In("checkpoint", err)
	}
	o, size, root, _, err := note.ParseCheckpoint(text)
	if err != nil {
		return Checked{}, err
	}
	if o != origin {
		return Checked{}, reject.New(reject.Splice, "checkpoint", "of the log %q, not %q", o, origin)
	}
	return Checked{Origin: o, Size: size, Root: root, By: by, Signed: string(cp)}, nil
}

// Node is a Merkle hash written as base64 in JSON.
type Node merkle.Hash

// MarshalText writes base64.
func (n Node) MarshalText() ([]byte, error) {
	return []byte(base64.StdEncoding.EncodeToString(n[:])), nil
}

// UnmarshalText reads base64 of 32 bytes.
func (n *Node) UnmarshalText(b []byte) error {
	raw, err := base64.StdEncoding.DecodeString(string(b))
	if err != nil || len(raw) != len(n) {
		return reject.New(reject.Malformed, "hash", "not base64 of 32 bytes")
	}
	copy(n[:], raw)
	return nil
}

func nodes(hs []merkle.Hash) []Node {
	out := make([]Node, len(hs))
	for i, h := range hs {
		out[i] = Node(h)
	}
	return out
}

func hashes(ns []Node) []merkle.Hash {
	out := make([]merkle.Hash, len(ns))
	for i, n := range ns {
		out[i] = merkle.Hash(n)
	}
	return out
}

// Inclusion is the proof that one cell is entry Index of the log whose
// checkpoint is Checkpoint (RFC 9162 §2.1.3): the entry's leaf hash and
// its audit path. With the cell's bytes, it is all anyone needs to
// check that one cell alone.
type Inclusion struct {
	Index      uint64 `json:"index"`
	Size       uint64 `json:"size"`
	Leaf       Node   `json:"leaf"` // SHA-256(0x00 ‖ the entry's bytes)
	Path       []Node `json:"path"`
	Checkpoint string `json:"checkpoint"` // signed, of Size entries
}

// Prove is the inclusion proof of entry i in the log's first n entries,
// cp being their signed checkpoint.
func (l *Log) Prove(i, n int, cp string) (Inclusion, error) {
	if n < 1 || n > l.Size() || i < 0 || i >= n {
		return Inclusion{}, reject.New(reject.Invalid, "index", "entry %d of a log of %d (checkpoint of %d)", i, l.Size(), n)
	}
	p, err := merkle.InclusionProof(l.leaves[:n], i)
	if err != nil {
		return Inclusion{}, err
	}
	return Inclusion{Index: uint64(i), Size: uint64(n), Leaf: Node(l.leaves[i]), Path: nodes(p), Checkpoint: cp}, nil
}

// maxPath bounds a proof's hashes: a tree of 2^64 leaves is 64 deep.
const maxPath = 64

// ParseInclusion reads an inclusion proof's JSON, strictly: no unknown
// field, every field present.
func ParseInclusion(b []byte) (Inclusion, error) {
	var p Inclusion
	if err := strictJSON(b, &p, "leaf", "path", "checkpoint", "size", "index"); err != nil {
		return Inclusion{}, reject.In("inclusion proof", err)
	}
	if len(p.Path) > maxPath {
		return Inclusion{}, reject.New(reject.Invalid, "inclusion proof: path", "%d hashes, over %d", len(p.Path), maxPath)
	}
	return p, nil
}

// VerifyInclusion checks that cell (its envelope's bytes, as logged) is
// entry p.Index of the log p.Checkpoint signs, under verifiers: the
// checkpoint opens and is of p.Size entries, the cell's bytes are the
// leaf (proof-log-edited if not) and the path leads from it to the
// root.
func VerifyInclusion(p Inclusion, cell []byte, origin string, verifiers []note.Verifier) (Checked, error) {
	c, err := OpenCheckpoint([]byte(p.Checkpoint), origin, verifiers)
	if err != nil {
		return Checked{}, err
	}
	if c.Size != p.Size {
		return Checked{}, reject.New(reject.Invalid, "inclusion proof", "a proof in a log of %d entries, its checkpoint is of %d", p.Size, c.Size)
	}
	if cell != nil {
		e, err := entryOf(cell)
		if err != nil {
			return Checked{}, err
		}
		if merkle.LeafHash(e) != merkle.Hash(p.Leaf) {
			return Checked{}, reject.New(reject.ProofLogEdited, fmt.Sprintf("entry %d", p.Index), "the cell's bytes are not the leaf the proof names")
		}
	}
	if err := merkle.VerifyInclusion(p.Index, p.Size, merkle.Hash(p.Leaf), c.Root, hashes(p.Path)); err != nil {
		return Checked{}, reject.Wrap(reject.Invalid, "inclusion proof", err)
	}
	return c, nil
}

// Consistency is the proof that the log's checkpoint New extends its
// checkpoint Old (RFC 9162 §2.1.4): both as signed, and the hashes.
type Consistency struct {
	Old   string `json:"old_checkpoint"`
	New   string `json:"new_checkpoint"`
	Proof []Node `json:"proof"`
}

// ProveConsistency is the consistency proof from the log's first m
// entries to its first n, old and new being their signed checkpoints.
func (l *Log) ProveConsistency(old, new string, m, n int) (Consistency, error) {
	if n > l.Size() || m < 1 || m > n {
		return Consistency{}, reject.New(reject.Invalid, "sizes", "a consistency proof from %d entries to %d in a log of %d", m, n, l.Size())
	}
	p, err := merkle.ConsistencyProof(l.leaves[:n], m)
	if err != nil {
		return Consistency{}, err
	}
	return Consistency{Old: old, New: new, Proof: nodes(p)}, nil
}

// ParseConsistency reads a consistency proof's JSON, strictly.
func ParseConsistency(b []byte) (Consistency, error) {
	var c Consistency
	if err := strictJSON(b, &c, "old_checkpoint", "new_checkpoint", "proof"); err != nil {
		return Consistency{}, reject.In("consistency proof", err)
	}
	if len(c.Proof) > 2*maxPath {
		return Consistency{}, reject.New(reject.Invalid, "consistency proof: proof", "%d hashes, over %d", len(c.Proof), 2*maxPath)
	}
	return c, nil
}

// CheckConsistency checks a consistency proof alone: both checkpoints
// open under verifiers, name origin, and the new one extends the old
// (proof-log-inconsistent if not: an entry of the old tree removed,
// reordered or changed).
func CheckConsistency(c Consistency, origin string, verifiers []note.Verifier) (Checked, Checked, error) {
	a, err := OpenCheckpoint([]byte(c.Old), origin, verifiers)
	if err != nil {
		return Checked{}, Checked{}, reject.In("old", err)
	}
	b, err := OpenCheckpoint([]byte(c.New), origin, verifiers)
	if err != nil {
		return Checked{}, Checked{}, reject.In("new", err)
	}
	if err := consistent(a, b, hashes(c.Proof)); err != nil {
		return a, b, err
	}
	return a, b, nil
}

// consistent checks that checkpoint b extends checkpoint a by proof.
func consistent(a, b Checked, proof []merkle.Hash) error {
	if a.Size > b.Size {
		return reject.New(reject.ProofLogInconsistent, "checkpoint", "of %d entries, after one of %d: entries were removed", b.Size, a.Size)
	}
	if a.Size == 0 {
		if a.Root != merkle.Root(nil) {
			return reject.New(reject.ProofLogInconsistent, "checkpoint", "of 0 entries with the root of some")
		}
		return nil
	}
	if err := merkle.VerifyConsistency(a.Size, b.Size, a.Root, b.Root, proof); err != nil {
		return reject.Wrap(reject.ProofLogInconsistent, fmt.Sprintf("checkpoint of %d entries", a.Size), err)
	}
	return nil
}

// VerifyLog checks a log at rest, from its bytes: every entry replays
// and opens (ParseLog: an entry that does not open is
// proof-log-edited), no fragment is torn (truncated), and the log
// extends each checkpoint given, checked by a consistency proof from
// the checkpoint's size to the log's computed from the entries (a
// checkpoint past the log's size, or one of its first entries that make
// another root, is proof-log-inconsistent: an entry removed or
// reordered since it was signed). It returns the replayed log.
func VerifyLog(b []byte, origin string, open Opener, checkpoints []Checked) (*Log, error) {
	l, torn, err := ParseLog(b, origin, open)
	if err != nil {
		return nil, err
	}
	if torn > 0 {
		return nil, reject.New(reject.Truncated, fmt.Sprintf("entry %d", l.Size()), "%d bytes without their newline", torn)
	}
	n := uint64(l.Size())
	head := Checked{Origin: origin, Size: n, Root: l.Root(l.Size())}
	for _, c := range checkpoints {
		if c.Origin != origin {
			return nil, reject.New(reject.Splice, "checkpoint", "of the log %q, not %q", c.Origin, origin)
		}
		if c.Size > n {
			return nil, reject.New(reject.ProofLogInconsistent, "checkpoint", "of %d entries; the log holds %d: entries were removed", c.Size, n)
		}
		var proof []merkle.Hash
		if c.Size > 0 && c.Size < n {
			if proof, err = merkle.ConsistencyProof(l.leaves, int(c.Size)); err != nil {
				return nil, err
			}
		}
		if err := consistent(c, head, proof); err != nil {
			return nil, fmt.Errorf("%w (its first %d entries make another root: one removed, reordered or changed)", err, c.Size)
		}
	}
	return l, nil
}

// strictJSON decodes b into v refusing unknown fields and requiring
// each of the named fields.
func strictJSON(b []byte, v any, required ...string) error {
	if len(b) > chain.MaxEntry {
		return reject.New(reject.Invalid, "", "%d bytes, over the bound of %d", len(b), chain.MaxEntry)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return reject.New(reject.Malformed, "", "not a JSON object: %v", err)
	}
	for _, f := range required {
		if _, ok := fields[f]; !ok {
			return reject.New(reject.MissingField, f, "required")
		}
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		var re *reject.Error
		if errors.As(err, &re) {
			return err
		}
		return reject.New(reject.Invalid, "", "%v", err)
	}
	return nil
}
