package vectors

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/merkle"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// KindFleet is the fleet vectors' kind (positive/fleet.json).
const KindFleet = "fleet"

// FleetType is fleet.json's "type".
const FleetType = "sandbox.fleet-vectors/1"

// FleetVectors is fleet.json: a fleet of 13 items, the leaf hash of each
// (SHA-256 of 0x00 and its canonical JSON), the root of every prefix, the
// checkpoint of all 13 signed under the pack's key (its verifier key
// given), inclusion proofs and consistency proofs, and proofs that must
// fail.
type FleetVectors struct {
	Type        string       `json:"type"`
	VerifierKey string       `json:"verifier_key"`
	Items       []fleet.Item `json:"items"`
	Leaves      []string     `json:"leaves"`
	Roots       []string     `json:"roots"` // roots[n]: the first n items
	Checkpoint  string       `json:"checkpoint"`
	Inclusion   []FleetProof `json:"inclusion"`
	Consistency []FleetCons  `json:"consistency"`
	// Lists are lists of items a fleet is or is not made of: in index
	// order from 0, each naming its run and input.
	Lists []FleetList `json:"item_lists"`
}

// FleetList is a list of items and what a reader makes of it: ok, or
// the reject code of the first item out of place.
type FleetList struct {
	Name   string       `json:"name"`
	Items  []fleet.Item `json:"items"`
	Expect string       `json:"expect"`
}

// FleetProof is one inclusion proof and whether it verifies.
type FleetProof struct {
	Index  uint64   `json:"index"`
	Size   uint64   `json:"size"`
	Path   []string `json:"path"`
	Expect string   `json:"expect"`
}

// FleetCons is one consistency proof and whether it verifies.
type FleetCons struct {
	Size1  uint64   `json:"size1"`
	Size2  uint64   `json:"size2"`
	Path   []string `json:"path"`
	Expect string   `json:"expect"`
}

func b64s(hs []merkle.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	return out
}

func unb64s(ss []string) ([]merkle.Hash, error) {
	out := make([]merkle.Hash, len(ss))
	for i, s := range ss {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("hash %d is not base64 of 32 bytes", i)
		}
		copy(out[i][:], b)
	}
	return out, nil
}

func fleetVectors(k key.Private) ([]byte, error) {
	var items []fleet.Item
	for i := range 13 {
		items = append(items, fleet.Item{Index: uint64(i), Input: addr.Of([]byte(fmt.Sprint("input ", i))), Run: addr.Of([]byte(fmt.Sprint("run ", i)))})
	}
	f, err := fleet.New("sandbox.example/fleet/vectors", items)
	if err != nil {
		return nil, err
	}
	v := FleetVectors{Type: FleetType, Items: items}
	if v.VerifierKey, err = note.VerifierKey("sandbox.example/vectors", k.Public()); err != nil {
		return nil, err
	}
	var leaves []merkle.Hash
	for _, it := range items {
		l, err := it.Leaf()
		if err != nil {
			return nil, err
		}
		leaves = append(leaves, l)
	}
	v.Leaves = b64s(leaves)
	for n := 0; n <= len(items); n++ {
		v.Roots = append(v.Roots, b64s([]merkle.Hash{merkle.Root(leaves[:n])})[0])
	}
	if v.Checkpoint, err = f.Checkpoint(13, "sandbox.example/vectors", k); err != nil {
		return nil, err
	}
	for _, c := range [][2]int{{0, 13}, {5, 13}, {12, 13}, {6, 7}, {0, 1}} {
		p, err := merkle.InclusionProof(leaves[:c[1]], c[0])
		if err != nil {
			return nil, err
		}
		v.Inclusion = append(v.Inclusion, FleetProof{Index: uint64(c[0]), Size: uint64(c[1]), Path: b64s(p), Expect: ExpectOK})
	}
	p5, _ := merkle.InclusionProof(leaves, 5)
	v.Inclusion = append(v.Inclusion,
		FleetProof{Index: 6, Size: 13, Path: b64s(p5), Expect: string(reject.Invalid)},
		FleetProof{Index: 5, Size: 13, Path: b64s(p5[:len(p5)-1]), Expect: string(reject.Invalid)},
		FleetProof{Index: 13, Size: 13, Path: b64s(p5), Expect: string(reject.Invalid)})
	for _, c := range [][2]int{{1, 13}, {4, 13}, {7, 13}, {12, 13}, {13, 13}, {3, 5}} {
		p, err := merkle.ConsistencyProof(leaves[:c[1]], c[0])
		if err != nil {
			return nil, err
		}
		v.Consistency = append(v.Consistency, FleetCons{Size1: uint64(c[0]), Size2: uint64(c[1]), Path: b64s(p), Expect: ExpectOK})
	}
	p7, _ := merkle.ConsistencyProof(leaves, 7)
	v.Consistency = append(v.Consistency,
		FleetCons{Size1: 6, Size2: 13, Path: b64s(p7), Expect: string(reject.Invalid)},
		FleetCons{Size1: 0, Size2: 13, Path: []string{}, Expect: string(reject.Invalid)},
		FleetCons{Size1: 13, Size2: 7, Path: []string{}, Expect: string(reject.Invalid)})
	swapped := slices.Clone(items[:5])
	swapped[3], swapped[4] = swapped[4], swapped[3]
	fromOne := slices.Clone(items[1:4])
	twice := append(slices.Clone(items[:3]), items[2])
	noRun := slices.Clone(items[:3])
	noRun[2].Run = addr.Addr{}
	v.Lists = []FleetList{
		{"in-order", items[:5], ExpectOK},
		{"out-of-order", swapped, string(reject.Invalid)},
		{"from-one", fromOne, string(reject.Invalid)},
		{"index-twice", twice, string(reject.Invalid)},
		{"no-run", noRun, string(reject.MissingField)},
	}
	b, err := jcs.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b, CheckFleet(b)
}

// CheckFleet checks fleet.json: every leaf and root recomputed, the
// checkpoint opened under its verifier key and its root the last one,
// every proof as it states.
func CheckFleet(b []byte) error {
	var v FleetVectors
	if err := jcs.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Type != FleetType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", v.Type, FleetType)
	}
	var leaves []merkle.Hash
	for i, it := range v.Items {
		l, err := it.Leaf()
		if err != nil {
			return err
		}
		if i >= len(v.Leaves) || b64s([]merkle.Hash{l})[0] != v.Leaves[i] {
			return fmt.Errorf("leaf %d differs", i)
		}
		leaves = append(leaves, l)
	}
	if len(v.Roots) != len(leaves)+1 {
		return fmt.Errorf("%d roots for %d items", len(v.Roots), len(leaves))
	}
	for n := range v.Roots {
		if b64s([]merkle.Hash{merkle.Root(leaves[:n])})[0] != v.Roots[n] {
			return fmt.Errorf("root of %d differs", n)
		}
	}
	vk, err := note.ParseVerifierKey(v.VerifierKey)
	if err != nil {
		return err
	}
	c, err := fleet.OpenCheckpoint([]byte(v.Checkpoint), []note.Verifier{vk})
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if c.Size != uint64(len(leaves)) || b64s([]merkle.Hash{c.Root})[0] != v.Roots[len(leaves)] {
		return errors.New("the checkpoint is not of the items")
	}
	var errs []error
	for i, p := range v.Inclusion {
		path, err := unb64s(p.Path)
		if err == nil {
			var leaf merkle.Hash
			if p.Index < uint64(len(leaves)) {
				leaf = leaves[p.Index]
			}
			root := merkle.Root(leaves[:min(p.Size, uint64(len(leaves)))])
			err = merkle.VerifyInclusion(p.Index, p.Size, leaf, root, path)
		}
		if (err == nil) != (p.Expect == ExpectOK) {
			errs = append(errs, fmt.Errorf("inclusion %d: %v, want %s", i, err, p.Expect))
		}
	}
	for i, p := range v.Consistency {
		path, err := unb64s(p.Path)
		if err == nil {
			r1 := merkle.Root(leaves[:min(p.Size1, uint64(len(leaves)))])
			r2 := merkle.Root(leaves[:min(p.Size2, uint64(len(leaves)))])
			err = merkle.VerifyConsistency(p.Size1, p.Size2, r1, r2, path)
		}
		if (err == nil) != (p.Expect == ExpectOK) {
			errs = append(errs, fmt.Errorf("consistency %d: %v, want %s", i, err, p.Expect))
		}
	}
	for _, l := range v.Lists {
		_, err := fleet.New("sandbox.example/fleet/vectors", l.Items)
		got := ExpectOK
		if err != nil {
			got = string(reject.CodeOf(err))
		}
		if got != l.Expect {
			errs = append(errs, fmt.Errorf("item list %s: %v, want %s", l.Name, err, l.Expect))
		}
	}
	return errors.Join(errs...)
}
