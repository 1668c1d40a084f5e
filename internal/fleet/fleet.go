package fleet

import (
	"encoding/base64"
	"fmt"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/merkle"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Item is one item of a fleet: its place, its input, its sealed run.
type Item struct {
	Index uint64    `json:"index"`
	Input addr.Addr `json:"input"`
	Run   addr.Addr `json:"run"`
}

// Leaf is the item's leaf hash: SHA-256(0x00 ‖ its canonical JSON).
func (it Item) Leaf() (merkle.Hash, error) {
	b, err := jcs.Marshal(it)
	if err != nil {
		return merkle.Hash{}, err
	}
	return merkle.LeafHash(b), nil
}

// Fleet is the items of one fleet, in index order, under an origin (the
// checkpoint's first line: whose fleet, which one).
type Fleet struct {
	Origin string
	Items  []Item
	leaves []merkle.Hash
}

// New checks that items are in index order from 0 and hashes them. An
// item out of its place is invalid, one without its run or input
// missing-field; errors are *reject.Error naming the item (items[i]).
func New(origin string, items []Item) (*Fleet, error) {
	f := &Fleet{Origin: origin, Items: items}
	for i, it := range items {
		where := fmt.Sprintf("items[%d]", i)
		if it.Index != uint64(i) {
			return nil, reject.New(reject.Invalid, where, "index %d: items are in index order from 0", it.Index)
		}
		if it.Run.IsZero() || it.Input.IsZero() {
			return nil, reject.New(reject.MissingField, where, "an item names its run and its input")
		}
		l, err := it.Leaf()
		if err != nil {
			return nil, err
		}
		f.leaves = append(f.leaves, l)
	}
	return f, nil
}

// Root is the tree hash of the first n items.
func (f *Fleet) Root(n int) merkle.Hash { return merkle.Root(f.leaves[:n]) }

// Checkpoint is the signed checkpoint of the first n items, by k under
// name.
func (f *Fleet) Checkpoint(n int, name string, k key.Private) (string, error) {
	if n < 1 || n > len(f.leaves) {
		return "", fmt.Errorf("fleet: a checkpoint of %d of %d items", n, len(f.leaves))
	}
	text, err := note.Checkpoint(f.Origin, uint64(n), f.Root(n))
	if err != nil {
		return "", err
	}
	return note.Sign(text, name, k)
}

// Proof is what shows one item is in a checkpoint's tree.
type Proof struct {
	Item Item   `json:"item"`
	Size uint64 `json:"size"`
	Path []Node `json:"path"`
}

// Node is a hash of a proof's path, base64 in JSON (as checkpoints
// write their roots).
type Node merkle.Hash

// MarshalText writes base64.
func (n Node) MarshalText() ([]byte, error) {
	return []byte(base64.StdEncoding.EncodeToString(n[:])), nil
}

// UnmarshalText reads base64 of 32 bytes.
func (n *Node) UnmarshalText(b []byte) error {
	d, err := base64.StdEncoding.DecodeString(string(b))
	if err != nil || len(d) != len(n) {
		return fmt.Errorf("fleet: a proof's hash is base64 of 32 bytes")
	}
	copy(n[:], d)
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

// Prove makes item i's proof in the tree of the first n items.
func (f *Fleet) Prove(i, n int) (Proof, error) {
	if n < 1 || n > len(f.leaves) || i < 0 || i >= n {
		return Proof{}, fmt.Errorf("fleet: item %d in a tree of %d of %d", i, n, len(f.leaves))
	}
	p, err := merkle.InclusionProof(f.leaves[:n], i)
	return Proof{Item: f.Items[i], Size: uint64(n), Path: nodes(p)}, err
}

// Consistency proves the tree of the first m items is a prefix of the
// tree of the first n.
func (f *Fleet) Consistency(m, n int) ([]merkle.Hash, error) {
	if n > len(f.leaves) {
		return nil, fmt.Errorf("fleet: %d of %d items", n, len(f.leaves))
	}
	return merkle.ConsistencyProof(f.leaves[:n], m)
}

// Checked is a checkpoint that opened.
type Checked struct {
	Origin string
	Size   uint64
	Root   merkle.Hash
	By     []string
}

// OpenCheckpoint verifies a signed checkpoint under verifiers.
func OpenCheckpoint(cp []byte, verifiers []note.Verifier) (Checked, error) {
	text, by, err := note.Open(cp, verifiers)
	if err != nil {
		return Checked{}, err
	}
	origin, size, root, _, err := note.ParseCheckpoint(text)
	if err != nil {
		return Checked{}, err
	}
	return Checked{Origin: origin, Size: size, Root: root, By: by}, nil
}

// Verify checks an item's proof against a checkpoint that opened.
func Verify(c Checked, p Proof) error {
	if p.Size != c.Size {
		return reject.New(reject.Invalid, "proof.size", "a proof in a tree of %d, the checkpoint's is %d", p.Size, c.Size)
	}
	leaf, err := p.Item.Leaf()
	if err != nil {
		return err
	}
	if err := merkle.VerifyInclusion(p.Item.Index, p.Size, leaf, c.Root, hashes(p.Path)); err != nil {
		return reject.Wrap(reject.Invalid, "proof", err)
	}
	return nil
}

// VerifyConsistency checks that checkpoint b extends checkpoint a of the
// same fleet.
func VerifyConsistency(a, b Checked, proof []merkle.Hash) error {
	if a.Origin != b.Origin {
		return reject.New(reject.Splice, "origin", "%q and %q are two fleets", a.Origin, b.Origin)
	}
	if err := merkle.VerifyConsistency(a.Size, b.Size, a.Root, b.Root, proof); err != nil {
		return reject.Wrap(reject.Invalid, "consistency", err)
	}
	return nil
}

// ConsistencyProof is what a watcher that pinned an earlier checkpoint
// of a fleet needs to check a later one extends it: both checkpoints,
// as signed, and the RFC 6962 consistency proof between their sizes.
type ConsistencyProof struct {
	Old   string `json:"old_checkpoint"`
	New   string `json:"new_checkpoint"`
	Proof []Node `json:"proof"`
}

// ProveConsistency makes the consistency proof from the signed
// checkpoint old (of the first m items) to new (of the first n).
func (f *Fleet) ProveConsistency(old, new string, m, n int) (ConsistencyProof, error) {
	if m < 1 || m > n {
		return ConsistencyProof{}, fmt.Errorf("fleet: a consistency proof from %d items to %d", m, n)
	}
	p, err := f.Consistency(m, n)
	return ConsistencyProof{Old: old, New: new, Proof: nodes(p)}, err
}

// CheckConsistency opens both checkpoints of c under verifiers and
// checks that the new one extends the old one.
func CheckConsistency(c ConsistencyProof, verifiers []note.Verifier) (Checked, Checked, error) {
	a, err := OpenCheckpoint([]byte(c.Old), verifiers)
	if err != nil {
		return a, Checked{}, reject.In("old_checkpoint", err)
	}
	b, err := OpenCheckpoint([]byte(c.New), verifiers)
	if err != nil {
		return a, b, reject.In("new_checkpoint", err)
	}
	if a.Size > b.Size {
		return a, b, reject.New(reject.Invalid, "old_checkpoint", "size %d is past the new checkpoint's %d", a.Size, b.Size)
	}
	return a, b, VerifyConsistency(a, b, hashes(c.Proof))
}
