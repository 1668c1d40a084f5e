package vectors

import (
	"errors"
	"fmt"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/record"
	"github.com/opensubstrate/sandbox/reject"
)

// KindDurable is the run-record vectors' kind (positive/durable.json).
const KindDurable = "durable"

// DurableType is durable.json's "type".
const DurableType = "sandbox.durable-vectors/1"

// Durable is durable.json: run records in their wire form (JSONL) and
// what a conforming verifier makes of each.
type Durable struct {
	Type  string        `json:"type"`
	Cases []DurableCase `json:"cases"`
}

// DurableCase is one record. A positive gives the state its replay
// reaches; a negative the reject code and the line (1-based) of the
// first failure. Where CitedHead is given, the record must also reach
// it: be its head, or have been after some segment.
type DurableCase struct {
	Name      string     `json:"name"`
	About     string     `json:"about"`
	Record    string     `json:"record"`
	CitedHead *addr.Addr `json:"cited_head,omitempty"`
	Expect    string     `json:"expect"`
	Line      int        `json:"line,omitempty"`
	Head      *addr.Addr `json:"head,omitempty"`
	Phase     string     `json:"phase,omitempty"`
	Segments  int        `json:"segments,omitempty"`
	Executed  int        `json:"executed,omitempty"`
	IdleUJ    int64      `json:"idle_uj,omitempty"`
}

// durableVectors builds durable.json.
func durableVectors() ([]byte, error) {
	unit, grants := addr.Of([]byte("vector unit")), addr.Of([]byte("vector grants"))
	a := func(s string) addr.Addr { return addr.Of([]byte(s)) }
	snap := record.Snapshot{Root: a("workspace tree 1"), Manifest: a("environment manifest")}
	snap2 := record.Snapshot{Root: a("workspace tree 2"), Manifest: a("environment manifest")}
	mem := a("memory image")
	withMem := record.Snapshot{Root: a("workspace tree 1"), Memory: &mem, Manifest: a("environment manifest")}
	ex := func(n string) record.Segment {
		return record.Segment{Kind: record.Executed, Attestation: a("attestation " + n)}
	}
	su := func(s record.Snapshot) record.Segment { return record.Segment{Kind: record.Suspended, Snapshot: s} }
	re := func(s record.Snapshot, uj uint64) record.Segment {
		return record.Segment{Kind: record.Resumed, Snapshot: s, IdleUJ: uj, IdleProvenance: "Estimator storage-retention/1 (5 W per TB retained, labelled)"}
	}
	cl := record.Segment{Kind: record.Closed, Reason: "abandoned"}
	header, err := jcs.Marshal(record.Header{Record: record.Domain, Unit: unit, Grants: grants})
	if err != nil {
		return nil, err
	}
	lines := func(segs ...record.Segment) ([]string, error) {
		out := []string{string(header)}
		for _, s := range segs {
			b, err := s.Bytes()
			if err != nil {
				return nil, err
			}
			out = append(out, string(b))
		}
		return out, nil
	}
	join := func(ls []string) string { return strings.Join(ls, "\n") + "\n" }
	var cases []DurableCase
	pos := func(name, about string, cited *addr.Addr, segs ...record.Segment) ([]string, error) {
		ls, err := lines(segs...)
		if err != nil {
			return nil, err
		}
		c := DurableCase{Name: name, About: about, Record: join(ls), CitedHead: cited, Expect: ExpectOK}
		if err := c.fill(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		cases = append(cases, c)
		return ls, nil
	}
	neg := func(name, about, rec string, code reject.Code, line int, cited *addr.Addr) {
		cases = append(cases, DurableCase{Name: name, About: about, Record: rec, CitedHead: cited, Expect: string(code), Line: line})
	}

	if _, err := pos("genesis-only", "a record of its genesis entry alone: head₀ = BLAKE3(\"sandbox.runrecord/1\" ‖ unit ‖ grants) over the raw 32-byte digests", nil); err != nil {
		return nil, err
	}
	life, err := pos("execute-suspend-resume-execute", "the chain across execute → suspend → resume → execute → suspend → resume → execute; idle energy summed over the resumptions", nil,
		ex("1"), su(snap), re(snap, 1500), ex("2"), su(snap2), re(snap2, 250), ex("3"))
	if err != nil {
		return nil, err
	}
	if _, err := pos("closed-while-parked", "closed while parked: abandonment is an honest outcome", nil, ex("1"), su(snap), cl); err != nil {
		return nil, err
	}
	if _, err := pos("memory-image", "a snapshot that keeps a memory image, resumed with it", nil, su(withMem), re(withMem, 0), ex("1")); err != nil {
		return nil, err
	}
	// The head after the second segment, cited by something sealed then.
	early, err := headAfter(life[:3])
	if err != nil {
		return nil, err
	}
	if _, err := pos("cited-head-reached", "the record grew since a head was cited for it: it reached that head after its second segment", &early,
		ex("1"), su(snap), re(snap, 1500), ex("2"), su(snap2), re(snap2, 250), ex("3")); err != nil {
		return nil, err
	}

	// A warm pool's sandbox: claimed with the energy spent keeping it
	// ready; or evicted unclaimed, its overhead on the close.
	poolProv := "Estimator pool-idle/1 (the sandbox's cgroup CPU time while ready × TDP / CPUs, labelled)"
	claim := record.Segment{Kind: record.Claimed, Pool: "dev", IdleUJ: 4200, IdleProvenance: poolProv}
	claimed, err := pos("pool-claimed", "a sandbox a warm pool kept ready, claimed: the claim is its first segment and its idle energy counts in the record's, then it runs, suspends and resumes", nil,
		claim, ex("1"), su(snap), re(snap, 1500), ex("2"))
	if err != nil {
		return nil, err
	}
	if _, err := pos("pool-evicted", "a ready sandbox evicted unclaimed: closed with the energy spent keeping it ready, its overhead", nil,
		record.Segment{Kind: record.Closed, Reason: "evicted from pool dev: older than its maximum age", IdleUJ: 9100, IdleProvenance: poolProv}); err != nil {
		return nil, err
	}

	// A sandbox placed by one host of a cluster on another: the
	// placement, signed by the host that chose, is its first segment.
	chooser, chosen := TestKey(), mustSeed(strings.Repeat("5a", 32))
	pl := &record.Placement{Host: chosen.Public(), By: chooser.Public(), Tier: "S1",
		Why: "one more S1 sandbox carries 4000 mW of its host's idle power there (12000 mW over 3 runs), the least of 2 hosts weighed (of 2 that give S1 with room)",
		Candidates: []record.Candidate{
			{Host: chooser.Public(), Capacity: 8, Live: 0, IdleMW: 6000, CostMW: 6000},
			{Host: chosen.Public(), Capacity: 8, Live: 2, IdleMW: 12000, CostMW: 4000},
		}}
	if err := pl.Sign(chooser); err != nil {
		return nil, err
	}
	place := record.Segment{Kind: record.Placed, Placement: pl}
	placed, err := pos("placed", "a sandbox placed by one host of a cluster on another: the placement (its candidates, their figures, why), signed by the host that chose, is its first segment; then it runs and suspends",
		nil, place, ex("1"), su(snap))
	if err != nil {
		return nil, err
	}

	// A fork: its record begins parked at the snapshot taken from its
	// parent (the parent's record and head cited), and runs once
	// resumed from it.
	parent := record.Parent{Record: "sb-0123456789ab", Genesis: record.Genesis(unit, grants), Head: early}
	fork := record.Segment{Kind: record.Forked, Parent: &parent, Snapshot: withMem}
	forkedLife, err := pos("forked", "a fork of the record execute-suspend-resume-execute, made at its head after its second segment: the forked segment cites that record (its sandbox's id, its head₀, that head) and names the snapshot taken there, memory image and all; the fork is parked there until it is resumed from that snapshot, then it runs",
		nil, fork, re(withMem, 3), ex("fork 1"))
	if err != nil {
		return nil, err
	}

	// Previews: a port of the live sandbox exposed through the service
	// (the record names the address of its token, never the token) until
	// its expiry, or withdrawn before; a suspension ends every preview,
	// and one exposed after the resumption is a new one.
	pvA, pvB := a("preview token A"), a("preview token B")
	until := int64(1767225600) // 2026-01-01T00:00:00Z
	expA := record.Segment{Kind: record.Exposed, Port: 8080, Preview: pvA, Until: until}
	previews, err := pos("previews", "a port exposed as a preview, the record naming the address of its token, never the token, and its expiry; withdrawn (revoked) before that; the run suspended and resumed, then another port exposed as a new preview, left to expire, and the record closed",
		nil, ex("1"), expA, ex("2"), record.Segment{Kind: record.Unexposed, Port: 8080, Preview: pvA, Reason: "revoked"},
		su(snap), re(snap, 1500), record.Segment{Kind: record.Exposed, Port: 3000, Preview: pvB, Until: until + 3600}, cl)
	if err != nil {
		return nil, err
	}
	expAB, _ := expA.Bytes()
	pv := func(line int, old, new string) string {
		return join(replaceIn(previews[:line+1], line, old, new))
	}

	// Negatives, each the life record or a part of it with one change.
	neg("exposed-while-parked", "a port exposed right after a suspension: a parked run has no process to reach", join(append(append([]string{}, life[:3]...), string(expAB))), reject.Phase, 4, nil)
	neg("unexposed-unknown", "a withdrawal naming a preview the record never exposed", pv(4, pvA.String(), pvB.String()), reject.Invalid, 5, nil)
	neg("unexposed-after-suspension", "a preview exposed before a suspension withdrawn after the resumption: the suspension ended it, it is open no more",
		join(append(append([]string{}, previews[:4]...), previews[5], previews[6], previews[4])), reject.Invalid, 7, nil)
	neg("unexposed-other-port", "a withdrawal naming an open preview with another port than the one exposed", pv(4, `"port":8080`, `"port":8081`), reject.Invalid, 5, nil)
	neg("exposed-repeated", "after the resumption, the preview withdrawn before exposed again: each preview is new",
		join(append(append([]string{}, previews[:7]...), previews[2])), reject.Invalid, 8, nil)
	neg("exposed-port-zero", "an exposure of port 0, which is no TCP port", pv(2, `"port":8080`, `"port":0`), reject.Invalid, 3, nil)
	neg("exposed-port-65536", "an exposure of port 65536, above the greatest TCP port", pv(2, `"port":8080`, `"port":65536`), reject.Invalid, 3, nil)
	neg("exposed-until-zero", "an exposure expiring at 0 Unix seconds: an expiry is 1 to 2^53-1", pv(2, fmt.Sprintf(`"until":%d`, until), `"until":0`), reject.IntRange, 3, nil)
	neg("exposed-zero-preview", "an exposure naming the all-zero address as its preview", pv(2, pvA.String(), "b3:"+strings.Repeat("0", 64)), reject.MissingField, 3, nil)
	neg("unexposed-without-reason", "a withdrawal that does not say why", pv(4, `,"reason":"revoked"`, ""), reject.MissingField, 5, nil)
	forkB, _ := fork.Bytes()
	neg("forked-not-first", "a forked segment after an exec: a fork begins its record, before anything runs in it", join(append(append([]string{}, life[:2]...), string(forkB))), reject.Phase, 3, nil)
	neg("forked-executed-before-resumed", "an exec right after the forked segment: a fork is parked at its snapshot until it is resumed from it", join(append(forkedLife[:2:2], forkedLife[3])), reject.Phase, 3, nil)
	neg("forked-resumed-elsewhere", "a fork resumed from another snapshot than the one it was made from", join(append(forkedLife[:2:2], strings.Replace(forkedLife[2], a("memory image").String(), a("another memory image").String(), 1))), reject.SnapshotMismatch, 3, nil)
	neg("forked-no-parent-id", "a forked segment whose parent record is not a sandbox id", join([]string{forkedLife[0], strings.Replace(forkedLife[1], `"record":"sb-0123456789ab"`, `"record":"sb-parent"`, 1)}), reject.Invalid, 2, nil)
	neg("forked-zero-head", "a forked segment citing the all-zero head", join([]string{forkedLife[0], strings.Replace(forkedLife[1], early.String(), "b3:"+strings.Repeat("0", 64), 1)}), reject.MissingField, 2, nil)
	neg("placed-forged", "a placement whose reason was changed after the host that chose signed it",
		join([]string{placed[0], strings.Replace(placed[1], "the least of", "the most of", 1)}), reject.Signature, 2, nil)
	placeB, _ := place.Bytes()
	neg("placed-while-parked", "a placement right after a suspension: a parked run is resumed first", join(append(append([]string{}, life[:3]...), string(placeB))), reject.Phase, 4, nil)
	neg("forked-snapshot", "resumed with a snapshot whose root differs from the one suspended",
		join(replaceIn(life, 3, snap.Root.String(), snap2.Root.String())), reject.SnapshotMismatch, 4, nil)
	neg("modified-suspended-snapshot", "the recorded suspension's root changed in the wire form: the resumption no longer restores what was suspended",
		join(replaceIn(life, 2, snap.Root.String(), a("tampered tree").String())), reject.SnapshotMismatch, 4, nil)
	fullHead, err := headAfter(life)
	if err != nil {
		return nil, err
	}
	both := replaceIn(replaceIn(life, 2, snap.Root.String(), a("tampered tree").String()), 3, snap.Root.String(), a("tampered tree").String())
	neg("modified-snapshot-consistently", "the suspension's and the resumption's root both changed: the record replays, to another head, and does not reach the head cited for it",
		join(both), reject.HeadMismatch, 0, &fullHead)
	neg("dropped-segments", "the last two segments dropped: a consistent truncation replays, and only the cited head catches it",
		join(life[:len(life)-2]), reject.HeadMismatch, 0, &fullHead)
	other, err := jcs.Marshal(record.Header{Record: record.Domain, Unit: unit, Grants: a("other grants")})
	if err != nil {
		return nil, err
	}
	spliced := append([]string{string(other)}, life[1:]...)
	neg("spliced-under-other-grants", "the segments of one record under the genesis of another grant set: the heads differ from the first step",
		join(spliced), reject.HeadMismatch, 0, &fullHead)
	bad := func(s string) string { return join(append(append([]string{}, life[:2]...), s)) }
	exB, _ := ex("x").Bytes()
	neg("executed-while-parked", "an executed segment right after a suspension", join(append(append([]string{}, life[:3]...), string(exB))), reject.Phase, 4, nil)
	suB, _ := su(snap).Bytes()
	neg("suspended-while-parked", "two suspensions in a row", join(append(append([]string{}, life[:3]...), string(suB))), reject.Phase, 4, nil)
	reB, _ := re(snap, 1).Bytes()
	neg("resumed-while-active", "a resumption with no suspension before it", bad(string(reB)), reject.Phase, 3, nil)
	clB, _ := cl.Bytes()
	claimB, _ := claim.Bytes()
	neg("claimed-after-executed", "a claim after the sandbox ran: a sandbox is claimed from its pool before anything runs in it", bad(string(claimB)), reject.Phase, 3, nil)
	neg("claimed-without-pool", "a claim naming no pool", join([]string{claimed[0], strings.Replace(claimed[1], `"pool":"dev"`, `"pool":""`, 1)}), reject.MissingField, 2, nil)
	neg("claimed-without-provenance", "a claim whose idle energy says nothing of how it was had", join([]string{claimed[0], strings.Replace(claimed[1], poolProv, "about 4 mJ", 1)}), reject.Invalid, 2, nil)
	neg("closed-idle-without-provenance", "a close with an overhead and no provenance for it", join([]string{claimed[0], `{"idle_uj":9100,"kind":"closed"}`}), reject.MissingField, 2, nil)
	neg("executed-twice", "the first run executed again after the resumption: one run is one execution, named once, or its energy would count twice",
		join(append(append([]string{}, life[:4]...), life[1])), reject.Invalid, 5, nil)
	neg("append-after-close", "an executed segment after the close", join(append(append([]string{}, life[:2]...), string(clB), string(exB))), reject.Closed, 4, nil)
	neg("non-canonical-segment", "a segment with a space after its opening brace", bad(`{ "attestation":"`+a("attestation 2").String()+`","kind":"executed"}`), reject.NonCanonical, 3, nil)
	neg("unknown-kind", "a segment of kind \"paused\"", bad(`{"kind":"paused"}`), reject.Invalid, 3, nil)
	neg("unknown-member", "an executed segment with a member it does not define", bad(`{"attestation":"`+a("attestation 2").String()+`","kind":"executed","note":"x"}`), reject.UnknownField, 3, nil)
	neg("zero-attestation", "an executed segment naming the all-zero address", bad(`{"attestation":"b3:`+strings.Repeat("0", 64)+`","kind":"executed"}`), reject.MissingField, 3, nil)
	neg("resumed-without-provenance", "a resumption whose idle energy says nothing of how it was had", join(append(append([]string{}, life[:3]...),
		strings.Replace(life[3], `"idle_provenance":"Estimator storage-retention/1 (5 W per TB retained, labelled)",`, "", 1))), reject.MissingField, 4, nil)
	neg("idle-float", "idle_uj with a fraction", join(append(append([]string{}, life[:3]...), strings.Replace(life[3], `"idle_uj":1500`, `"idle_uj":1500.5`, 1))), reject.Float, 4, nil)
	neg("torn-last-line", "the last line without its newline: in the wire form every entry is whole", strings.TrimSuffix(join(life), "\n"), reject.Truncated, len(life), nil)
	neg("empty-line", "an empty line between two entries", life[0]+"\n\n"+life[1]+"\n", reject.Malformed, 2, nil)
	neg("no-genesis", "segments without the genesis entry", join(life[1:]), reject.Missing, 1, nil)
	neg("other-domain", "a genesis entry of \"sandbox.runrecord/2\"", join(append([]string{strings.Replace(life[0], "runrecord/1", "runrecord/2", 1)}, life[1:]...)), reject.Unrecognised, 1, nil)

	// Every negative must fail as stated here too, before it is published.
	for _, c := range cases {
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("durable vector %s: %w", c.Name, err)
		}
	}
	return jcs.Marshal(Durable{Type: DurableType, Cases: cases})
}

// replaceIn copies ls with old replaced by new in line i (0-based).
func replaceIn(ls []string, i int, old, new string) []string {
	out := append([]string{}, ls...)
	out[i] = strings.Replace(out[i], old, new, 1)
	return out
}

// headAfter is the head of a record of these lines.
func headAfter(ls []string) (addr.Addr, error) {
	st, err := record.VerifyBytes([]byte(strings.Join(ls, "\n") + "\n"))
	return st.Head, err
}

// fill sets a positive's expected state from its replay.
func (c *DurableCase) fill() error {
	st, err := c.replay()
	if err != nil {
		return err
	}
	h := st.Head
	c.Head, c.Phase, c.Segments, c.Executed, c.IdleUJ = &h, string(st.Phase), st.Segments, st.Executed, int64(st.IdleUJ)
	return nil
}

func (c *DurableCase) replay() (record.State, error) {
	if c.CitedHead != nil {
		return record.Reaches([]byte(c.Record), *c.CitedHead)
	}
	return record.VerifyBytes([]byte(c.Record))
}

// check replays a case and compares it with what it states.
func (c *DurableCase) check() error {
	st, err := c.replay()
	if c.Expect == ExpectOK {
		switch {
		case err != nil:
			return fmt.Errorf("want ok, got %w", err)
		case c.Head == nil || st.Head != *c.Head:
			return fmt.Errorf("head %s, want %v", st.Head, c.Head)
		case string(st.Phase) != c.Phase || st.Segments != c.Segments || st.Executed != c.Executed || int64(st.IdleUJ) != c.IdleUJ:
			return fmt.Errorf("state %s/%d/%d/%d, want %s/%d/%d/%d", st.Phase, st.Segments, st.Executed, st.IdleUJ, c.Phase, c.Segments, c.Executed, c.IdleUJ)
		}
		return nil
	}
	var re *reject.Error
	switch {
	case err == nil:
		return fmt.Errorf("want %s at line %d, got ok", c.Expect, c.Line)
	case !errors.As(err, &re) || string(re.Code) != c.Expect:
		return fmt.Errorf("want %s, got %w", c.Expect, err)
	case c.Line > 0 && !strings.HasPrefix(re.Where, fmt.Sprintf("line %d", c.Line)):
		return fmt.Errorf("want line %d, got %w", c.Line, err)
	}
	return nil
}

// CheckDurable checks durable.json: every case as it states.
func CheckDurable(b []byte) error {
	var d Durable
	if err := jcs.Unmarshal(b, &d); err != nil {
		return err
	}
	if d.Type != DurableType {
		return reject.New(reject.Unrecognised, "type", "%q, want %q", d.Type, DurableType)
	}
	var errs []error
	for _, c := range d.Cases {
		if err := c.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(errs...)
}
