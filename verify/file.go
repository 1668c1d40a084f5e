package verify

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/evidence"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/locality"
	"github.com/opensubstrate/sandbox/receipt"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// The file names of a run directory.
const (
	FileAttestation = "attestation.json"
	FileReceipt     = "receipt.cose"
	FileUnit        = "unit.json"
	FileGrants      = "grants.json"
	FileDecisions   = "decisions.json"
	FileJournal     = "journal.cbor"
	FileStdout      = "stdout.log"
	FileStderr      = "stderr.log"
	// FileJCPDecision is the JCP gate's decision that allowed the run
	// (sandbox.attestation/3's jcp member).
	FileJCPDecision = "jcp-decision.cose"
	// FileEvidence is the hardware evidence of an S6 or S7 run
	// (sandbox.attestation/4's evidence member): an SEV-SNP report (with
	// its certificate table), a TDX quote, or a software report.
	FileEvidence = "evidence.bin"
	// FileLocality is an S7 run's locality claim (sandbox.locality/1;
	// sandbox.attestation/4's locality member).
	FileLocality = "locality.json"
	// FileDeviceEvidence is an S6 or S7 run's device evidence: a line per
	// device besides the CPU (sandbox.device-evidence/1; the attestation's
	// evidence.devices).
	FileDeviceEvidence = "evidence-devices.json"
)

// RunFiles are every name a run directory may hold.
var RunFiles = []string{FileAttestation, FileReceipt, FileUnit, FileGrants, FileDecisions, FileJournal, FileStdout, FileStderr, FileJCPDecision, FileEvidence, FileLocality, FileDeviceEvidence}

// Kinds of sealed file.
const (
	KindAttestation = "attestation"
	KindReceipt     = "receipt"
	KindUnit        = "unit"
	KindGrants      = "grants"
	KindDecisions   = "decisions"
	KindJCPDecision = "jcp-decision"
	KindEvidence    = "evidence"
	KindLocality    = "locality"
	KindDevices     = "device-evidence"
	KindJournal     = "journal"
	KindOutput      = "output"
	KindClaim       = "claim" // what the verifier re-derived, against the claim
	KindKey         = "key"
	KindUnknown     = "unknown"
)

// Result is the verdict on one file.
type Result struct {
	Path string
	Kind string
	Addr addr.Addr // zero when the file could not be read
	Note string    // what was established, for people
	Err  error     // nil when every check passed
}

// Verifier verifies sealed files against a trust set.
type Verifier struct {
	Trust key.Trust
	// AllowSoftware accepts an S6 run's software-grounded evidence (the
	// software provider's, for tests and wiring): still checked, and
	// shown as software-grounded; without it, such evidence is refused
	// (evidence-software).
	AllowSoftware bool
	// Locality is what an S7 run's locality claim is checked against:
	// the anchors trusted and the regions by name. Without it, a
	// locality claim is refused (locality-unknown-anchor): no anchor is
	// trusted.
	Locality *locality.Config
	// EvidencePolicy, when set, is a policy an S6 or S7 run's hardware
	// evidence must meet besides its binding (measurements allowed, a
	// minimum TCB, debug forbidden unless it allows it); without it,
	// any measurement is admitted and a debug guest is named in the note.
	EvidencePolicy *evidence.Policy
	ReadFile       func(string) ([]byte, error) // os.ReadFile in production
	ReadDir        func(string) ([]string, error)
}

func (v *Verifier) read(p string) ([]byte, error) {
	if v.ReadFile != nil {
		return v.ReadFile(p)
	}
	return readFile(p)
}

// Path verifies a file or a run directory and returns one Result per
// file.
func (v *Verifier) Path(p string) []Result {
	fi, err := os.Stat(p)
	if err != nil {
		return []Result{{Path: p, Kind: KindUnknown, Err: err}}
	}
	if fi.IsDir() {
		att := filepath.Join(p, FileAttestation)
		if _, err := os.Stat(att); err != nil {
			return []Result{{Path: p, Kind: KindUnknown, Err: reject.New(reject.Missing, "", "not a run directory: no %s in it", FileAttestation)}}
		}
		return v.Attestation(att)
	}
	b, err := v.read(p)
	if err != nil {
		return []Result{{Path: p, Kind: KindUnknown, Err: err}}
	}
	switch Recognise(p, b) {
	case KindAttestation:
		return v.Attestation(p)
	case KindReceipt:
		r := Result{Path: p, Kind: KindReceipt, Addr: addr.Of(b)}
		rc, err := receipt.Open(b, v.Trust)
		r.Err = err
		if rc != nil {
			r.Note = receiptNote(rc)
		}
		return []Result{r}
	case KindUnit:
		r := Result{Path: p, Kind: KindUnit, Addr: addr.Of(b)}
		if u, err := unit.Decode(b); err != nil {
			r.Err = err
		} else {
			r.Note = fmt.Sprintf("canonical %s unit %s (not signed on its own)", u.Kind, u.Entry)
		}
		return []Result{r}
	case KindGrants:
		r := Result{Path: p, Kind: KindGrants, Addr: addr.Of(b)}
		if _, err := grant.Decode(b); err != nil {
			r.Err = err
		} else {
			r.Note = "canonical grant set (not signed on its own)"
		}
		return []Result{r}
	case KindDecisions:
		r := Result{Path: p, Kind: KindDecisions, Addr: addr.Of(b)}
		if l, err := grant.DecodeLog(b); err != nil {
			r.Err = err
		} else {
			r.Note = fmt.Sprintf("canonical decision log, %s (not signed on its own)", countEntries(len(l.Decisions)))
		}
		return []Result{r}
	case KindKey:
		r := Result{Path: p, Kind: KindKey}
		k, err := key.ParsePublic(strings.TrimSpace(string(b)))
		if err != nil {
			r.Err = reject.Wrap(reject.Malformed, "", err)
		} else {
			r.Addr = k.ID()
			r.Note = "public key " + k.String()
			if v.Trust.Trusts(k) {
				r.Note += " (trusted)"
			}
		}
		return []Result{r}
	}
	return []Result{{Path: p, Kind: KindUnknown, Addr: addr.Of(b), Err: reject.New(reject.Unrecognised, "", "not a sealed file this verifier knows (attestation, JCR-1 receipt, unit, grants, decision log, public key)")}}
}

// Recognise names the kind of a sealed file from its file name, then its
// content.
func Recognise(p string, b []byte) string {
	switch filepath.Base(p) {
	case FileAttestation:
		return KindAttestation
	case FileReceipt:
		return KindReceipt
	case FileUnit:
		return KindUnit
	case FileGrants:
		return KindGrants
	case FileDecisions:
		return KindDecisions
	}
	switch {
	case len(b) > 0 && b[0] == 0xd2 || strings.HasSuffix(p, ".cose"):
		return KindReceipt
	case bytes.HasPrefix(b, []byte(key.PublicPrefix)):
		return KindKey
	case bytes.Contains(b, []byte(`"claim"`)):
		return KindAttestation
	case bytes.Contains(b, []byte(`"type":"`+unit.Type+`"`)):
		return KindUnit
	case bytes.Contains(b, []byte(`"type":"`+grant.Type+`"`)):
		return KindGrants
	case bytes.Contains(b, []byte(`"type":"`+grant.LogType+`"`)):
		return KindDecisions
	}
	return KindUnknown
}

// Attestation verifies the attestation at p and every object it binds,
// which must be beside it under the run-directory names.
func (v *Verifier) Attestation(p string) []Result {
	dir := filepath.Dir(p)
	b, err := v.read(p)
	if errors.Is(err, fs.ErrNotExist) {
		err = reject.New(reject.Missing, "", "no %s: nothing here says what ran", filepath.Base(p))
	}
	if err != nil {
		return []Result{{Path: p, Kind: KindAttestation, Err: err}}
	}
	a, err := attest.Verify(b, v.Trust)
	head := Result{Path: p, Kind: KindAttestation, Err: err}
	if a == nil {
		return []Result{head}
	}
	head.Addr = a.Addr
	c := a.Claim
	head.Note = fmt.Sprintf("%s at %s (required %s), %s, signed by %s", c.Outcome.Status, c.Tier.Chosen, c.Tier.Required, c.Executor, c.Signer.ID())
	out := []Result{head}

	bound := func(name, kind string, want addr.Addr, check func([]byte) (string, error)) {
		r := Result{Path: filepath.Join(dir, name), Kind: kind}
		raw, err := v.read(r.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r.Err = reject.New(reject.Missing, "", "the attestation binds %s %s, and it is not beside it", kind, want)
		case err != nil:
			r.Err = err
		default:
			r.Addr = addr.Of(raw)
			if r.Addr != want {
				r.Err = reject.New(reject.Address, "", "%s hashes to %s, the attestation binds %s", kind, r.Addr, want)
				break
			}
			r.Note, r.Err = check(raw)
		}
		out = append(out, r)
	}
	var (
		u  *unit.Unit
		gs *grant.Set
		rc *receipt.Receipt
	)
	bound(FileUnit, KindUnit, c.Unit, func(raw []byte) (string, error) {
		du, err := unit.Decode(raw)
		if err != nil {
			return "", err
		}
		u = &du
		if du.Grants != c.Grants {
			return "", reject.New(reject.Invalid, "unit.grants", "the unit binds grants %s, the attestation %s", du.Grants, c.Grants)
		}
		if du.Image != c.Image {
			return "", reject.New(reject.Invalid, "unit.image", "the unit binds image %s, the attestation %s", du.Image, c.Image)
		}
		return fmt.Sprintf("%s unit %s, bound", du.Kind, du.Entry), nil
	})
	bound(FileGrants, KindGrants, c.Grants, func(raw []byte) (string, error) {
		g, err := grant.Decode(raw)
		if err != nil {
			return "", err
		}
		gs = &g
		return "grant set, bound", nil
	})
	bound(FileDecisions, KindDecisions, c.Decisions, func(raw []byte) (string, error) {
		l, err := grant.DecodeLog(raw)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("decision log, %s, bound", countEntries(len(l.Decisions))), nil
	})
	bound(FileReceipt, KindReceipt, c.Receipt, func(raw []byte) (string, error) {
		r, err := receipt.Open(raw, v.Trust)
		if err != nil {
			return "", err
		}
		rc = r
		if r.Unit != c.Unit {
			return "", reject.New(reject.Invalid, "receipt.unit", "the receipt is for unit %s, the attestation for %s", r.Unit, c.Unit)
		}
		if r.Signer != c.Signer {
			return "", reject.New(reject.Invalid, "receipt.signer", "the receipt is signed by %s, the attestation by %s", r.Signer.ID(), c.Signer.ID())
		}
		return receiptNote(r) + ", bound", nil
	})
	if c.JCP != nil {
		bound(FileJCPDecision, KindJCPDecision, *c.JCP, func(raw []byte) (string, error) { return jcpDecision(raw, &c) })
	} else if _, err := v.read(filepath.Join(dir, FileJCPDecision)); !errors.Is(err, fs.ErrNotExist) {
		out = append(out, Result{Path: filepath.Join(dir, FileJCPDecision), Kind: KindJCPDecision,
			Err: reject.New(reject.Unrecognised, "", "the attestation cites no JCP decision, so nothing binds %s", FileJCPDecision)})
	}
	if c.Evidence != nil {
		bound(FileEvidence, KindEvidence, c.Evidence.Report, func(raw []byte) (string, error) { return v.evidence(raw, &c) })
	} else if _, err := v.read(filepath.Join(dir, FileEvidence)); !errors.Is(err, fs.ErrNotExist) {
		out = append(out, Result{Path: filepath.Join(dir, FileEvidence), Kind: KindEvidence,
			Err: reject.New(reject.Unrecognised, "", "the attestation cites no evidence, so nothing binds %s", FileEvidence)})
	}
	if c.Evidence != nil && c.Evidence.Devices != nil {
		bound(FileDeviceEvidence, KindDevices, *c.Evidence.Devices, func(raw []byte) (string, error) { return DeviceEvidence(raw, &c, time.Time{}) })
	} else if _, err := v.read(filepath.Join(dir, FileDeviceEvidence)); !errors.Is(err, fs.ErrNotExist) {
		out = append(out, Result{Path: filepath.Join(dir, FileDeviceEvidence), Kind: KindDevices,
			Err: reject.New(reject.Unrecognised, "", "the attestation cites no device evidence, so nothing binds %s", FileDeviceEvidence)})
	}
	if c.Locality != nil {
		bound(FileLocality, KindLocality, c.Locality.Claim, func(raw []byte) (string, error) { return v.locality(raw, &c) })
	} else if _, err := v.read(filepath.Join(dir, FileLocality)); !errors.Is(err, fs.ErrNotExist) {
		out = append(out, Result{Path: filepath.Join(dir, FileLocality), Kind: KindLocality,
			Err: reject.New(reject.Unrecognised, "", "the attestation cites no locality claim, so nothing binds %s", FileLocality)})
	}
	if u != nil && gs != nil && rc != nil {
		r := Result{Path: p, Kind: KindClaim, Addr: a.Addr, Note: "tier, devices and times re-derived from the unit, grants and receipt"}
		r.Err = Rederive(&c, u, gs, rc)
		out = append(out, r)
	}
	var outcome *journal.Outcome
	if c.Journal != nil {
		r, o := v.journal(filepath.Join(dir, FileJournal), &c, u, rc)
		out = append(out, r)
		outcome = o
	} else if r, ok := v.unboundJournal(dir); ok {
		out = append(out, r)
	}
	out = append(out, v.outputs(dir, c.Journal != nil, outcome)...)
	return append(out, v.strays(dir)...)
}

// evidence checks the hardware evidence an attestation cites (Evidence,
// with the certificates the report carries and none given).
func (v *Verifier) evidence(raw []byte, c *attest.Claim) (string, error) {
	if v.EvidencePolicy != nil {
		return EvidenceUnder(raw, c, *v.EvidencePolicy, v.AllowSoftware)
	}
	return Evidence(raw, c, v.AllowSoftware)
}

// Evidence checks raw, the hardware evidence claim c cites (a run
// directory's evidence.bin), offline, as the run verifier does: software
// evidence refused unless allowSoftware (evidence-software); the report's
// chain to the vendor's root with every certificate valid at the claim's
// ended time, and its signature (package evidence); its report_data
// equal to the claim's binding (attest.Binding: evidence-report-data), so
// that the report vouches for this claim and no other; and its kind the
// one the claim states (invalid). A debug guest is admitted and named in
// the note. certs are endorsement certificates the report does not carry
// (an SEV-SNP report's VCEK, DER or PEM), as evidence.Options.Certs; the
// run verifier gives none. It does not check that raw is the report the
// claim cites by address: the caller does.
func Evidence(raw []byte, c *attest.Claim, allowSoftware bool, certs ...[]byte) (string, error) {
	return EvidenceUnder(raw, c, evidence.Policy{AllowDebug: true}, allowSoftware, certs...)
}

// EvidenceUnder is Evidence under a policy the evidence must meet too
// (measurements, a minimum TCB, debug forbidden: docs/spec/evidence.md
// §4); its report_data is always the claim's binding, whatever p says.
func EvidenceUnder(raw []byte, c *attest.Claim, p evidence.Policy, allowSoftware bool, certs ...[]byte) (string, error) {
	if c.Evidence == nil {
		return "", reject.New(reject.Unrecognised, "claim.evidence", "the claim cites no evidence")
	}
	binding, err := attest.Binding(*c, c.Signer)
	if err != nil {
		return "", err
	}
	ended, err := time.Parse(attest.TimeLayout, c.Ended)
	if err != nil {
		return "", reject.New(reject.Invalid, "claim.ended", "%v", err)
	}
	p.ReportData = hex.EncodeToString(binding[:])
	r, err := evidence.Verify(raw, evidence.Options{At: ended, AllowSoftware: allowSoftware, Certs: certs, Policy: p})
	if err != nil {
		return "", err
	}
	if string(r.Kind) != c.Evidence.Kind || r.Software != c.Evidence.Software {
		return "", reject.New(reject.Invalid, "claim.evidence.kind", "the claim says %s evidence, the report is %s", c.Evidence.Kind, r.Kind)
	}
	if r.Software {
		return fmt.Sprintf("SOFTWARE-GROUNDED evidence (%s, no hardware vouches for it), bound to the claim", c.Evidence.Provider), nil
	}
	debug := ""
	if r.Debug {
		debug = ", a DEBUG guest (its memory is readable by its host)"
	}
	return fmt.Sprintf("%s evidence from %s, %s chain to the vendor root at the run's end, bound to the claim%s", r.Kind, c.Evidence.Provider, r.Product, debug), nil
}

// DeviceEvidence checks an S6 or S7 run's device evidence file: each
// line names a device of the claim's hardware, and its report verifies offline under its chain to the vendor's
// root (an NVIDIA GPU's: evidence/spdm) at the run's end (or at, when
// not zero) and carries the claim's device nonce (attest.DeviceNonce):
// the GPU vouches for this claim, on its own line, not folded into the
// CPU's.
func DeviceEvidence(raw []byte, c *attest.Claim, at time.Time) (string, error) {
	d, err := attest.DecodeDevices(raw)
	if err != nil {
		return "", err
	}
	binding, err := attest.Binding(*c, c.Signer)
	if err != nil {
		return "", err
	}
	if at.IsZero() {
		if at, err = time.Parse(attest.TimeLayout, c.Ended); err != nil {
			return "", reject.New(reject.Invalid, "claim.ended", "%v", err)
		}
	}
	nonce := attest.DeviceNonce(binding)
	var notes []string
	for i, r := range d.Devices {
		where := fmt.Sprintf("devices[%d]", i)
		if !slices.ContainsFunc(c.Hardware.Devices, func(h attest.Device) bool { return h.Class == r.Class && h.ID == r.ID }) {
			return "", reject.New(reject.Invalid, where, "%s %q is not a device the claim's hardware names", r.Class, r.ID)
		}
		rep, err := hex.DecodeString(r.Report)
		if err != nil {
			return "", reject.New(reject.Malformed, where+".report", "%v", err)
		}
		res, err := evidence.Verify(rep, evidence.Options{At: at, Certs: [][]byte{[]byte(r.Chain)},
			Policy: evidence.Policy{ReportData: hex.EncodeToString(nonce[:])}})
		if err != nil {
			return "", reject.In(where, err)
		}
		if string(res.Kind) != r.Kind {
			return "", reject.New(reject.Invalid, where+".kind", "the line says %s, the report is %s", r.Kind, res.Kind)
		}
		notes = append(notes, fmt.Sprintf("%s %s (%s, %d measurements)", r.Class, r.ID, res.Firmware, len(res.Measurements)))
	}
	return "device evidence, each bound to the claim: " + strings.Join(notes, "; "), nil
}

// locality checks an S7 run's locality claim: bound to this claim
// (attest.LocalityBinding) and its signer, every measurement signed by
// a trusted anchor, and its region the one the verifier knows by the
// name the claim cites, held by some measurement's bound.
func (v *Verifier) locality(raw []byte, c *attest.Claim) (string, error) {
	binding, err := attest.LocalityBinding(*c, c.Signer)
	if err != nil {
		return "", err
	}
	lc, err := locality.Parse(raw)
	if err != nil {
		return "", err
	}
	if v.Locality == nil {
		return "", reject.New(reject.LocalityUnknownAnchor, "", "no locality anchors are trusted: give the verifier a locality configuration (--locality FILE)")
	}
	want, ok := v.Locality.Regions[c.Locality.Region]
	if !ok {
		return "", reject.New(reject.Invalid, "claim.locality.region", "%q is not a region the verifier knows (it knows %v)", c.Locality.Region, v.Locality.RegionNames())
	}
	if lc.Region != want {
		return "", reject.New(reject.Invalid, "locality.region", "the claim is for %+v, and %q is %+v", lc.Region, c.Locality.Region, want)
	}
	r, err := lc.Verify(v.Locality.Published(), binding, c.Signer)
	if err != nil {
		return "", err
	}
	w := r.Bounds[r.Witness]
	return fmt.Sprintf("within %s: %d measurement(s), the host within %d km of anchor %s, %d km inside the region, bound to the claim",
		c.Locality.Region, len(r.Bounds), w.BoundM/1000, w.Anchor.ID(), w.MarginM/1000), nil
}

// jcpDecision checks the JCP decision an attestation cites: a decision,
// by the attestation's signer, that allowed this image at this tier.
func jcpDecision(raw []byte, c *attest.Claim) (string, error) {
	t, err := jcp.Open(raw)
	if err != nil {
		return "", err
	}
	d := t.Decision
	switch {
	case d == nil:
		return "", reject.New(reject.Invalid, "", "a %s, not a JCP decision", t.Type)
	case d.Iss != c.Signer:
		return "", reject.New(reject.Invalid, "jcp-decision.iss", "decided by %s, the attestation is signed by %s", d.Iss.ID(), c.Signer.ID())
	case !d.Allow:
		return "", reject.New(reject.Invalid, "jcp-decision.allow", "the decision refused the run (%s)", d.Code)
	case d.Image != c.Image:
		return "", reject.New(reject.Invalid, "jcp-decision.image", "the decision is for image %s, the run ran %s", d.Image, c.Image)
	case d.Tier != c.Tier.Chosen.String():
		return "", reject.New(reject.Invalid, "jcp-decision.tier", "the decision is for %s, the run ran at %s", d.Tier, c.Tier.Chosen)
	}
	return fmt.Sprintf("JCP decision: allowed under a chain of %d grant(s), reservation %d, bound", len(d.Chain), d.Reservation), nil
}

// outputs checks stdout.log and stderr.log against the addresses and
// lengths the journal's outcome entry records: missing, cut short
// (truncated), longer with the recorded bytes as a prefix (extended), or
// other bytes (address). Where the outcome says the host kept only a
// prefix of a stream (its output bound), the file is checked against
// that prefix's length and address, and the note says how much of the
// stream was dropped from the record and the whole stream's BLAKE3,
// which no file here can confirm. A run without a journal binds no
// output, so it may hold none.
func (v *Verifier) outputs(dir string, bound bool, o *journal.Outcome) []Result {
	var out []Result
	for _, stdout := range []bool{true, false} {
		name, a, n, kept := FileStderr, addr.Addr{}, uint64(0), (*journal.Kept)(nil)
		if stdout {
			name = FileStdout
		}
		if o != nil {
			a, n, kept = o.Stderr, o.StderrLen, o.StderrKept
			if stdout {
				a, n, kept = o.Stdout, o.StdoutLen, o.StdoutKept
			}
		}
		r := Result{Path: filepath.Join(dir, name), Kind: KindOutput}
		raw, err := v.read(r.Path)
		switch {
		case !bound && errors.Is(err, fs.ErrNotExist):
			continue
		case !bound:
			r.Err = reject.New(reject.Unrecognised, "", "the attestation binds no journal, so nothing binds %s", name)
		case o == nil:
			continue // the journal failed; its result says why
		case errors.Is(err, fs.ErrNotExist):
			r.Err = reject.New(reject.Missing, "", "the journal records %s (%d bytes, %s), and it is not beside it", name, n, a)
		case err != nil:
			r.Err = err
		case kept != nil:
			r.Addr = addr.Of(raw)
			r.Err = outputErr(name, "the record kept", raw, kept.Addr, kept.Len)
			if r.Err == nil {
				r.Note = fmt.Sprintf("the first %d of the %d bytes the run wrote, bound by the journal's outcome; %d were dropped from the record at the host's output bound (the whole stream's BLAKE3, %s, is recorded, not checkable from this file)", kept.Len, n, n-kept.Len, a)
			}
		default:
			r.Addr = addr.Of(raw)
			r.Err = outputErr(name, "the run wrote", raw, a, n)
			if r.Err == nil {
				r.Note = fmt.Sprintf("%d bytes, bound by the journal's outcome", n)
			}
		}
		out = append(out, r)
	}
	return out
}

// outputErr compares an output file with what the run recorded.
// who says whose bytes they are ("the run wrote", "the record kept").
func outputErr(name, who string, b []byte, want addr.Addr, n uint64) error {
	got := uint64(len(b))
	switch {
	case got == n && addr.Of(b) == want:
		return nil
	case got < n:
		return reject.New(reject.Truncated, "", "%s is %d bytes, %s %d", name, got, who, n)
	case got > n && addr.Of(b[:n]) == want:
		return reject.New(reject.Extended, "", "%s is %d bytes: the %d %s, and more after them", name, got, n, who)
	}
	return reject.New(reject.Address, "", "%s hashes to %s, %s %d bytes hashing to %s", name, addr.Of(b), who, n, want)
}

// strays refuses any file in a run directory that no record binds.
func (v *Verifier) strays(dir string) []Result {
	names, err := v.readDir(dir)
	if err != nil {
		return nil
	}
	var out []Result
	for _, n := range names {
		if !slices.Contains(RunFiles, n) {
			out = append(out, Result{Path: filepath.Join(dir, n), Kind: KindUnknown,
				Err: reject.New(reject.Unrecognised, "", "a file in a run directory that no record binds")})
		}
	}
	return out
}

func (v *Verifier) readDir(dir string) ([]string, error) {
	if v.ReadDir != nil {
		return v.ReadDir(dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// unboundJournal refuses a journal.cbor beside a claim that binds none:
// nothing vouches for it, and a reader would take it for the run's.
func (v *Verifier) unboundJournal(dir string) (Result, bool) {
	p := filepath.Join(dir, FileJournal)
	if _, err := v.read(p); errors.Is(err, fs.ErrNotExist) {
		return Result{}, false
	}
	return Result{Path: p, Kind: KindJournal,
		Err: reject.New(reject.Unrecognised, "", "the attestation binds no journal, so nothing binds %s", FileJournal)}, true
}

// journal checks a bound journal: its root (the head of its hash chain,
// not the hash of the file) must be the one the claim gives, and it must
// end with its outcome entry, which it returns. The outcome must be the
// claim's (status, and the exit code where the status is exited, else
// -1) and its fuel the receipt's (0 where the receipt counts none); rc
// is nil when the receipt failed, and its own result says why.
func (v *Verifier) journal(p string, c *attest.Claim, u *unit.Unit, rc *receipt.Receipt) (Result, *journal.Outcome) {
	want := *c.Journal
	r := Result{Path: p, Kind: KindJournal}
	raw, err := v.read(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.Err = reject.New(reject.Missing, "", "the attestation binds a journal with root %s, and it is not beside it", want)
		return r, nil
	case err != nil:
		r.Err = err
		return r, nil
	}
	entries, root, err := journal.Parse(raw)
	if err != nil {
		r.Err = err
		return r, nil
	}
	r.Addr = root
	if root != want {
		r.Err = reject.New(reject.Address, "", "journal root is %s, the attestation binds %s", root, want)
		return r, nil
	}
	o, err := journal.LastOutcome(entries)
	if err != nil {
		r.Err = err
		return r, nil
	}
	if u != nil && u.Kind == tier.Native && len(entries) != 1 {
		// A native program's inputs are not brokered: there is nothing to
		// record but its outcome, and nothing to replay.
		r.Err = reject.New(reject.Invalid, fmt.Sprintf("journal entry %d", 0), "a native unit's journal holds its outcome alone, not %d entries", len(entries))
		return r, nil
	}
	if err := outcomeAgrees(o, c, rc, len(entries)-1); err != nil {
		r.Err = err
		return r, nil
	}
	r.Note = fmt.Sprintf("journal, %s, root bound", countEntries(len(entries)))
	return r, &o
}

// outcomeAgrees compares the journal's outcome entry (entry n) with the
// claim's outcome and the receipt's fuel.
func outcomeAgrees(o journal.Outcome, c *attest.Claim, rc *receipt.Receipt, n int) error {
	where := fmt.Sprintf("journal entry %d", n)
	code := int64(-1)
	if c.Outcome.ExitCode != nil {
		code = int64(*c.Outcome.ExitCode)
	}
	switch {
	case o.Status != string(c.Outcome.Status):
		return reject.New(reject.Invalid, where+".status", "the journal's outcome is %q, the attestation's %q", o.Status, c.Outcome.Status)
	case o.ExitCode != code:
		return reject.New(reject.Invalid, where+".exit_code", "the journal's exit code is %d, the attestation's %d (-1: none)", o.ExitCode, code)
	case rc == nil:
		return nil
	}
	fuel := uint64(0)
	if rc.Fuel != nil {
		fuel = *rc.Fuel
	}
	if o.Fuel != fuel {
		return reject.New(reject.Invalid, where+".fuel", "the journal's fuel is %d, the receipt's %d (0: none counted)", o.Fuel, fuel)
	}
	return nil
}

// countEntries says "1 entry", "2 entries".
func countEntries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

func receiptNote(r *receipt.Receipt) string {
	var parts []string
	for _, d := range r.Devices {
		parts = append(parts, fmt.Sprintf("%s %s measured + %s estimated", d.Class, d.Measured, d.Estimated))
	}
	if len(parts) == 0 {
		parts = append(parts, "no device readings")
	}
	return strings.Join(parts, "; ")
}
