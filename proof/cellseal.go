package proof

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// StatementType is the in-toto Statement's _type.
const StatementType = "https://in-toto.io/Statement/v1"

// MaxCellSize is the largest cell file Open reads.
const MaxCellSize = 1 << 20

// Subject names: the substrate's binary, the pack's manifest, and each
// green run's attestation ("runs/<address hex>/attestation.json", its
// path in a --runs directory).
const (
	SubjectSubstrate = "substrate"
	SubjectPack      = "pack/manifest.json"
	subjectRunPrefix = "runs/"
	subjectRunSuffix = "/attestation.json"
)

// Statement is an in-toto Statement v1 whose predicate is a cell.
type Statement struct {
	Type          string    `json:"_type"`
	Subject       []Subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     Cell      `json:"predicate"`
}

// Subject is one artifact the statement is about, by digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"` // "sha256" and "blake3", lower-case hex
}

// Digests is a subject's digest set of b: sha256 (which every in-toto
// verifier knows) and blake3 (this substrate's addresses).
func Digests(b []byte) map[string]string {
	s := sha256.Sum256(b)
	return map[string]string{"sha256": hex.EncodeToString(s[:]), "blake3": addr.Of(b).Hex()}
}

// RunSubject is the subject name of a run's attestation.
func RunSubject(run addr.Addr) string { return subjectRunPrefix + run.Hex() + subjectRunSuffix }

// Evidence is the bytes a cell's subjects are the digests of.
type Evidence struct {
	Binary []byte // the substrate's executable
	Pack   []byte // the pack's manifest.json
	// Runs are the attestations of the green runs, by address.
	Runs map[addr.Addr][]byte
}

// Seal checks the cell (Check), makes its statement, with a subject for
// the binary, the pack and each green run, and signs it with k in a
// DSSE envelope: the cell file's bytes.
func Seal(k key.Private, c Cell, ev Evidence) ([]byte, error) {
	c.Host = k.Public()
	if err := Check(c); err != nil {
		return nil, err
	}
	subs := []Subject{{Name: SubjectSubstrate, Digest: Digests(ev.Binary)}, {Name: SubjectPack, Digest: Digests(ev.Pack)}}
	for _, t := range c.Tiers {
		if t.State != Green {
			continue
		}
		a, _ := addr.Parse(t.Run) // Check parsed it
		b, ok := ev.Runs[a]
		if !ok {
			return nil, fmt.Errorf("proof: no attestation for %s's run %s", t.Tier, t.Run)
		}
		subs = append(subs, Subject{Name: RunSubject(a), Digest: Digests(b)})
	}
	st := Statement{Type: StatementType, Subject: subs, PredicateType: PredicateType, Predicate: c}
	if err := checkSubjects(st); err != nil {
		return nil, err
	}
	body, err := jcs.Marshal(st)
	if err != nil {
		return nil, err
	}
	return marshalEnvelope(Sign(k, PayloadType, body))
}

// Opened is a cell file read, not yet verified: its envelope and its
// statement.
type Opened struct {
	Envelope  Envelope
	Payload   []byte
	Statement Statement
}

// Open reads a cell file, untrusted: one DSSE envelope (no other
// members), payload type in-toto, its payload one canonical in-toto
// Statement v1 of a proof cell. It checks no signature (Verify does).
func Open(b []byte) (*Opened, error) {
	if len(b) > MaxCellSize {
		return nil, reject.New(reject.Invalid, "", "%d bytes: a cell is at most %d", len(b), MaxCellSize)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, reject.New(reject.Truncated, "", "empty input")
	}
	var o Opened
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o.Envelope); err != nil {
		return nil, reject.Wrap(reject.Malformed, "envelope", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, reject.New(reject.Malformed, "envelope", "more than one JSON value")
	}
	if o.Envelope.PayloadType != PayloadType {
		return nil, reject.New(reject.Unrecognised, "payloadType", "%q, want %q", clip(o.Envelope.PayloadType), PayloadType)
	}
	body, err := o.Envelope.Body()
	if err != nil {
		return nil, err
	}
	o.Payload = body
	if err := jcs.Unmarshal(body, &o.Statement); err != nil {
		return nil, reject.In("payload", err)
	}
	switch st := o.Statement; {
	case st.Type != StatementType:
		return nil, reject.New(reject.Unrecognised, "payload: _type", "%q, want %q", clip(st.Type), StatementType)
	case st.PredicateType != PredicateType:
		return nil, reject.New(reject.Unrecognised, "payload: predicateType", "%q, want %q", clip(st.PredicateType), PredicateType)
	}
	return &o, nil
}

// Check checks a cell's schema: the substrate's binary and the pack by
// address, the pack's counts adding up (proof-pack), every tier S0 to
// S7 once and in order (proof-tier), each state one of the three with
// what it needs (proof-state), the times RFC 3339, the end not before
// the start.
func Check(c Cell) error {
	if _, err := addr.Parse(c.Substrate.Binary); err != nil {
		return reject.New(reject.Invalid, "predicate.substrate.binary", "%v", err)
	}
	if c.Substrate.Version == "" {
		return reject.New(reject.MissingField, "predicate.substrate.version", "a cell names its substrate's version")
	}
	if c.Target.OS == "" || c.Target.Arch == "" {
		return reject.New(reject.MissingField, "predicate.target", "a target has its OS and architecture")
	}
	if err := checkPack(c.Pack); err != nil {
		return err
	}
	if err := checkTiers(c.Tiers); err != nil {
		return err
	}
	start, err := time.Parse(time.RFC3339, c.Started)
	if err != nil {
		return reject.New(reject.Invalid, "predicate.started", "not an RFC 3339 time: %q", clip(c.Started))
	}
	end, err := time.Parse(time.RFC3339, c.Ended)
	if err != nil {
		return reject.New(reject.Invalid, "predicate.ended", "not an RFC 3339 time: %q", clip(c.Ended))
	}
	if end.Before(start) {
		return reject.New(reject.Invalid, "predicate.ended", "%s is before the start %s", c.Ended, c.Started)
	}
	return nil
}

func checkPack(p PackCounts) error {
	if _, err := addr.Parse(p.Address); err != nil {
		return reject.New(ProofPack, "predicate.pack.address", "%v", err)
	}
	if p.Vectors < 0 || p.Passed < 0 || p.Failed < 0 || p.Passed+p.Failed != p.Vectors {
		return reject.New(ProofPack, "predicate.pack", "%d vectors, %d passed and %d failed: the passed and the failed are the vectors", p.Vectors, p.Passed, p.Failed)
	}
	if p.Vectors == 0 {
		return reject.New(ProofPack, "predicate.pack", "no vectors: a cell runs the whole pack")
	}
	return nil
}

func checkTiers(ts []TierResult) error {
	seen := map[tier.Tier]bool{}
	for i, r := range ts {
		where := fmt.Sprintf("predicate.tiers[%d]", i)
		if seen[r.Tier] {
			return reject.New(ProofTier, where, "%s twice: every tier has one result", r.Tier)
		}
		seen[r.Tier] = true
		if i >= len(tier.All) {
			return reject.New(ProofTier, where, "%d results: the ladder has %d tiers", len(ts), len(tier.All))
		}
		if r.Tier != tier.All[i] {
			return reject.New(ProofTier, where, "%s where %s belongs: the tiers are S0 to S7, in order", r.Tier, tier.All[i])
		}
		if err := checkState(r); err != nil {
			return reject.In(where, err)
		}
	}
	if len(ts) < len(tier.All) {
		return reject.New(ProofTier, "predicate.tiers", "no %s: every tier has a result, none is skipped", tier.All[len(ts)])
	}
	return nil
}

func checkState(r TierResult) error {
	switch r.State {
	case Green:
		if _, err := addr.Parse(r.Run); err != nil {
			return reject.New(ProofState, "run", "green with no sealed run's address: %v", err)
		}
		if r.Error != "" || r.Reason != "" {
			return reject.New(ProofState, "", "green with an error or a reason")
		}
		if r.Executor == "" {
			return reject.New(ProofState, "executor", "green: a run names its executor")
		}
	case Red:
		if r.Error == "" {
			return reject.New(ProofState, "error", "red with no error: a failure says what failed")
		}
		if r.Run != "" || r.Reason != "" {
			return reject.New(ProofState, "", "red with a run or a reason")
		}
	case Unavailable:
		if r.Reason == "" {
			return reject.New(ProofState, "reason", "unavailable with no reason: the probe says why")
		}
		if r.Run != "" || r.Error != "" || r.Executor != "" {
			return reject.New(ProofState, "", "unavailable with a run, an error or an executor")
		}
	default:
		return reject.New(ProofState, "state", "%q: a tier is green, red or unavailable", clip(string(r.State)))
	}
	return nil
}

// checkSubjects: the statement's subjects are exactly its predicate's:
// the substrate and the pack (their blake3 digests their addresses),
// then each green run's attestation in tier order, named by the run's
// address; each with a sha256 and a blake3 digest. (A run's address is
// its claim's, not its attestation file's: the file's digests are
// checked against the file where its run directory is given.)
func checkSubjects(st Statement) error {
	c := st.Predicate
	type want struct{ name, b3 string }
	bin, _ := addr.Parse(c.Substrate.Binary)
	pack, _ := addr.Parse(c.Pack.Address)
	ws := []want{{SubjectSubstrate, bin.Hex()}, {SubjectPack, pack.Hex()}}
	for _, t := range c.Tiers {
		if t.State == Green {
			a, _ := addr.Parse(t.Run)
			ws = append(ws, want{RunSubject(a), ""})
		}
	}
	if len(st.Subject) != len(ws) {
		return reject.New(ProofSubject, "subject", "%d subjects, want %d: the substrate, the pack and each green run", len(st.Subject), len(ws))
	}
	for i, w := range ws {
		s := st.Subject[i]
		where := fmt.Sprintf("subject[%d]", i)
		if s.Name != w.name {
			return reject.New(ProofSubject, where, "named %q, want %q", clip(s.Name), w.name)
		}
		if len(s.Digest) != 2 || !isHex256(s.Digest["sha256"]) || !isHex256(s.Digest["blake3"]) {
			return reject.New(ProofSubject, where, "a subject has two digests, sha256 and blake3, each 64 lower-case hex digits")
		}
		if w.b3 != "" && s.Digest["blake3"] != w.b3 {
			return reject.New(ProofSubject, where, "blake3 %s, but the predicate names %s", s.Digest["blake3"], w.b3)
		}
	}
	return nil
}

func isHex256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}
