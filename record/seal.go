package record

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// SealDomain is a seal's "seal", and the domain tag of what it signs.
const SealDomain = "sandbox.runrecord-seal/1"

// Seal is a host's signature over a record's head after one of its
// entries: the host that appended entry Entry (1 is the genesis) of the
// record of sandbox Record says the record's head was then Head. A head
// commits to every entry up to it, so the seal of an entry covers it and
// everything before it; a record whose every entry is sealed by a key
// one trusts was written, entry by entry, by hosts one trusts.
//
// Seals are kept beside the record, one per line in the record's order
// (docs/spec/run-record.md, "Seals"): the record's own wire form, its
// heads and its vectors are unchanged by them.
type Seal struct {
	Seal   string     `json:"seal"` // SealDomain
	Record string     `json:"record"`
	Entry  int        `json:"entry"`
	Head   addr.Addr  `json:"head"`
	Key    key.Public `json:"key"`
	Sig    string     `json:"sig"` // 128 lowercase hex digits
}

// SealMessage is what the seal of entry n of record id at head signs:
//
//	"sandbox.runrecord-seal/1" ‖ 0x00 ‖ id ‖ 0x00 ‖ decimal(n) ‖ 0x00 ‖ head (32 raw bytes)
func SealMessage(id string, n int, head addr.Addr) []byte {
	var b bytes.Buffer
	b.WriteString(SealDomain)
	b.WriteByte(0)
	b.WriteString(id)
	b.WriteByte(0)
	b.WriteString(strconv.Itoa(n))
	b.WriteByte(0)
	b.Write(head[:])
	return b.Bytes()
}

// NewSeal is k's seal of entry n of record id at head.
func NewSeal(k key.Private, id string, n int, head addr.Addr) Seal {
	return Seal{Seal: SealDomain, Record: id, Entry: n, Head: head, Key: k.Public(), Sig: hex.EncodeToString(k.Sign(SealMessage(id, n, head)))}
}

// Bytes is the seal's canonical line (no newline).
func (s Seal) Bytes() ([]byte, error) { return jcs.Marshal(s) }

// ParseSeal decodes a seal's line strictly (canonical JSON, its members
// and no others) and checks its signature under its own key; whether the
// key is trusted, and whether the seal is of the right entry and head,
// are the caller's.
func ParseSeal(b []byte) (Seal, error) {
	var s Seal
	if err := jcs.Unmarshal(b, &s); err != nil {
		return Seal{}, err
	}
	switch {
	case s.Seal != SealDomain:
		return Seal{}, reject.New(reject.Unrecognised, "seal", "%q: this verifier knows %q", s.Seal, SealDomain)
	case s.Record == "":
		return Seal{}, reject.New(reject.MissingField, "record", "a seal names its record")
	case s.Entry < 1:
		return Seal{}, reject.New(reject.Invalid, "entry", "%d: entries are numbered from 1 (the genesis)", s.Entry)
	case s.Head.IsZero():
		return Seal{}, reject.New(reject.MissingField, "head", "the all-zero address names nothing")
	}
	if err := s.Key.Check(); err != nil {
		return Seal{}, reject.Wrap(reject.WeakKey, "key", err)
	}
	sig, err := hex.DecodeString(s.Sig)
	if err != nil || len(sig) != 64 || hex.EncodeToString(sig) != s.Sig {
		return Seal{}, reject.New(reject.Malformed, "sig", "want 128 lowercase hex digits")
	}
	if !s.Key.Verify(SealMessage(s.Record, s.Entry, s.Head), sig) {
		return Seal{}, reject.New(reject.Signature, "sig", "not %s's signature of entry %d of %s at head %s", s.Key, s.Entry, s.Record, s.Head)
	}
	return s, nil
}

// Heads are the heads of a record after each of its entries (the
// genesis's is head₀), verified from its genesis as Verify does.
func Heads(entries [][]byte) ([]addr.Addr, State, error) {
	heads := make([]addr.Addr, 0, len(entries))
	st, _, err := replay(entries, func(_ Segment, before addr.Addr) error {
		heads = append(heads, before)
		return nil
	})
	if err != nil {
		return nil, st, err
	}
	return append(heads, st.Head), st, nil
}

// CheckSeals checks that seals seal record id's entries one by one, in
// order, each by a key trusted says it trusts, and returns each entry's
// sealer. A record with an entry no seal covers, a seal of another
// record, entry or head, a seal under a key not trusted, or a seal past
// the record's last entry is refused, naming the entry.
func CheckSeals(id string, entries, seals [][]byte, trusted func(key.Public) bool) ([]key.Public, error) {
	heads, _, err := Heads(entries)
	if err != nil {
		return nil, err
	}
	if len(seals) > len(entries) {
		return nil, reject.New(reject.Extended, fmt.Sprintf("seal %d", len(entries)+1), "a seal of entry %d, which the record does not have (%d entries)", len(entries)+1, len(entries))
	}
	out := make([]key.Public, len(entries))
	for i := range entries {
		where := fmt.Sprintf("entry %d", i+1)
		if i >= len(seals) {
			return nil, reject.New(reject.Missing, where, "no host sealed it: an entry is signed by the host that appended it")
		}
		s, err := ParseSeal(seals[i])
		if err != nil {
			return nil, fmt.Errorf("%s: its seal: %w", where, err)
		}
		switch {
		case s.Record != id:
			return nil, reject.New(reject.Splice, where, "its seal is of record %s, not %s", s.Record, id)
		case s.Entry != i+1:
			return nil, reject.New(reject.Invalid, where, "its seal is of entry %d", s.Entry)
		case s.Head != heads[i]:
			return nil, reject.New(reject.HeadMismatch, where, "its seal signs head %s; the record's head after it is %s", s.Head, heads[i])
		case !trusted(s.Key):
			return nil, reject.New(reject.UntrustedKey, where, "sealed by %s, a key not trusted here (trust it explicitly: --trust)", s.Key)
		}
		out[i] = s.Key
	}
	return out, nil
}

// SealPath is where the seals of the record at path are kept: beside
// it, ".jsonl" replaced by ".seals".
func SealPath(path string) string {
	if p, ok := strings.CutSuffix(path, ".jsonl"); ok {
		return p + ".seals"
	}
	return path + ".seals"
}

// ReadSeals reads the seals beside the record at path (none: an empty
// list), every line whole.
func ReadSeals(path string) ([][]byte, error) {
	seals, _, err := chain.Read(SealPath(path))
	return seals, err
}
