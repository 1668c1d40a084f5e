package attest

import (
	"bytes"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// Type is the claim's type tag. Every JSON record a host key signs
// carries its own "type" member, so the signed bytes of two kinds of
// record never coincide: that member separates the signature's domain.
const Type = "sandbox.attestation/1"

// TypeV2 is the claim type of /1 with two more optional members: record
// (the run record a run is a segment of, and the head it continues) and
// audit_prev (the S7 audit log's head before the run). A claim with
// either is /2, a claim with neither is /1: each version's decoder stays
// strict, and a verifier that knows only /1 refuses a /2 claim by its
// type (unrecognised) rather than by a member it does not know.
const TypeV2 = "sandbox.attestation/2"

// TypeV3 is /2 with one more member: jcp, the address of the JCP gate's
// decision that allowed the run (docs/spec/jcp.md §5.1). A claim with jcp
// is /3 (record and audit_prev may be there too), one without it is /1
// or /2 as before.
const TypeV3 = "sandbox.attestation/3"

// TypeV4 is /3 with one more member: evidence, the hardware evidence
// that the run's host is what it says (an S6 or S7 run): which provider
// gave it, of what kind, and the address of the report in the run
// directory (evidence.bin), whose report_data is Binding of this claim
// (docs/spec/attestation.md). A claim with evidence is /4 (record,
// audit_prev and jcp may be there too).
const TypeV4 = "sandbox.attestation/4"

// TimeLayout is the claim's time format: RFC 3339, UTC, nanoseconds.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// Claim is what an attestation states.
type Claim struct {
	Type   string     `json:"type"`
	Signer key.Public `json:"signer"`

	Unit      addr.Addr  `json:"unit"`      // the unit of work, canonical JSON
	Image     addr.Addr  `json:"image"`     // the module, program or VM image that ran
	Grants    addr.Addr  `json:"grants"`    // the grant set, canonical JSON
	Decisions addr.Addr  `json:"decisions"` // the enforcer's decision log
	Receipt   addr.Addr  `json:"receipt"`   // the JCR-1 energy receipt
	Journal   *addr.Addr `json:"journal,omitempty"`

	Tier     Tier     `json:"tier"`
	Executor string   `json:"executor"` // e.g. "wazero/v1.12.0"
	Hardware Hardware `json:"hardware"`
	Outcome  Outcome  `json:"outcome"`
	Started  string   `json:"started"`
	Ended    string   `json:"ended"`
	// Notes are the host's remarks on the run, for people (a grant bound
	// as it is, writes kept aside, denials the kernel could not report):
	// said by sandbox, never part of the guest's own streams. Absent
	// when there are none.
	Notes []string `json:"notes,omitempty"`

	// Record is the run record this run is a segment of (/2 only).
	Record *RecordCite `json:"record,omitempty"`
	// AuditPrev is the host's S7 audit log head before this run (/2
	// only).
	AuditPrev *addr.Addr `json:"audit_prev,omitempty"`
	// JCP is the JCP decision that allowed the run (/3 only): its file
	// is jcp-decision.cose in the run directory.
	JCP *addr.Addr `json:"jcp,omitempty"`
	// Evidence is the hardware evidence bound to the run (/4 only).
	Evidence *Evidence `json:"evidence,omitempty"`
	// Locality is an S7 run's locality claim (/4 only, with evidence).
	Locality *LocalityCite `json:"locality,omitempty"`
}

// LocalityCite names an S7 run's locality claim (locality.json, a
// sandbox.locality/1 claim bound to LocalityBinding of this claim) and
// the region its grant named.
type LocalityCite struct {
	Claim  addr.Addr `json:"claim"`
	Region string    `json:"region"`
}

// Evidence cites a run's hardware evidence.
type Evidence struct {
	// Provider is the provider that obtained it: configfs-tsm, software.
	Provider string `json:"provider"`
	// Kind is what the report is: sev-snp, tdx, software.
	Kind string `json:"kind"`
	// Report is the address of the report (evidence.bin).
	Report addr.Addr `json:"report"`
	// Software is true for evidence no hardware vouches for (the
	// software provider's, for tests and wiring): a verifier refuses it
	// unless told to allow it, and shows it as software-grounded.
	Software bool `json:"software,omitempty"`
	// Devices is the address of the device evidence file
	// (evidence-devices.json, Devices): a line per device the run was
	// given besides the CPU. Absent when it was given none.
	Devices *addr.Addr `json:"devices,omitempty"`
}

// BindingDomain separates the binding's hash from every other use of
// SHA-512 over a claim.
const BindingDomain = "sandbox.evidence-binding/1\n"

// LocalityBinding is the binding an S7 run's locality claim carries:
// the address of the canonical JSON (JCS) of the claim as it is signed
// (type /4, signer set) without its evidence and locality members. The
// locality claim is made first, then cited, then the evidence is
// obtained over a claim that cites it.
func LocalityBinding(c Claim, signer key.Public) (addr.Addr, error) {
	c.Type, c.Signer, c.Evidence, c.Locality = TypeV4, signer, nil, nil
	if c.Hardware.Devices == nil {
		c.Hardware.Devices = []Device{}
	}
	b, err := jcs.Marshal(c)
	if err != nil {
		return addr.Addr{}, err
	}
	return addr.Of(b), nil
}

// Binding is the report_data a claim's evidence must carry: SHA-512 of
// BindingDomain followed by the canonical JSON (JCS) of the claim as it
// is signed, type /4 and signer set, without its evidence member. The
// evidence is obtained after everything else in the claim is fixed, and
// the signature then covers the evidence's address: the report vouches
// for the claim, the claim for the report.
func Binding(c Claim, signer key.Public) ([64]byte, error) {
	c.Type, c.Signer, c.Evidence = TypeV4, signer, nil
	if c.Hardware.Devices == nil {
		c.Hardware.Devices = []Device{}
	}
	b, err := jcs.Marshal(c)
	if err != nil {
		return [64]byte{}, err
	}
	return sha512.Sum512(append([]byte(BindingDomain), b...)), nil
}

// RecordCite names a run record and the head a run continues from.
type RecordCite struct {
	// Genesis is the record's head₀, which binds its unit and grants.
	Genesis addr.Addr `json:"genesis"`
	// Head is the record's head when the run began: the record reaches
	// it before the run's own segment.
	Head addr.Addr `json:"head"`
}

// Tier records the rung the unit required, the one it ran at, and why.
type Tier struct {
	Required tier.Tier `json:"required"`
	Chosen   tier.Tier `json:"chosen"`
	Reason   string    `json:"reason"`
}

// Hardware identifies what the run executed on.
type Hardware struct {
	Host    Host     `json:"host"`
	Devices []Device `json:"devices"`
}

// Host identifies the machine.
type Host struct {
	Name   string `json:"name"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	Kernel string `json:"kernel,omitempty"`
	CPU    string `json:"cpu,omitempty"`
}

// Device identifies one compute device the run could use.
type Device struct {
	Class  device.Class `json:"class"`
	Model  string       `json:"model"`
	Driver string       `json:"driver"`
	ID     string       `json:"id,omitempty"` // a stable identifier such as a GPU UUID
}

// Outcome is how the run ended.
type Outcome struct {
	Status   Status `json:"status"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// Status is the closed list of ways a run ends.
type Status string

// The statuses.
const (
	Exited    Status = "exited"      // the guest ended itself; ExitCode is set
	Killed    Status = "killed"      // ended by a signal or by cancellation
	Deadline  Status = "deadline"    // its wall-clock deadline passed
	OutOfFuel Status = "out-of-fuel" // its fuel budget ran out
	OutOfMem  Status = "out-of-memory"
	Trapped   Status = "trapped" // the guest trapped (a WebAssembly trap or a fatal signal)
	Failed    Status = "failed"  // the executor failed; Detail says how
	// BudgetExhausted: the run was stopped when the meter's figure for a
	// device class reached its compute grant's budget (Detail says which,
	// and by how much the receipt may be over: one sampling interval).
	BudgetExhausted Status = "budget-exhausted"
)

func (s Status) valid() bool {
	switch s {
	case Exited, Killed, Deadline, OutOfFuel, OutOfMem, Trapped, Failed, BudgetExhausted:
		return true
	}
	return false
}

// Time formats t as the claim writes times.
func Time(t time.Time) string { return t.UTC().Format(TimeLayout) }

// Validate checks the claim's fields. Errors are *reject.Error.
func (c *Claim) Validate() error {
	v2 := c.Record != nil || c.AuditPrev != nil
	if c.Evidence != nil || c.Locality != nil || c.Type == TypeV4 {
		return c.validateV4()
	}
	switch {
	case c.JCP != nil && c.Type != TypeV3:
		return reject.New(reject.UnknownField, "claim.jcp", "a member of %s, not of %s", TypeV3, c.Type)
	case c.Type == TypeV3 && c.JCP == nil:
		return reject.New(reject.NonCanonical, "claim.type", "a claim without jcp is %s or %s", Type, TypeV2)
	case c.Type == TypeV3 && c.JCP.IsZero():
		return reject.New(reject.MissingField, "claim.jcp", "the zero address names no decision")
	case c.Type == TypeV3:
	case c.Type == Type && c.Record != nil:
		return reject.New(reject.UnknownField, "claim.record", "a member of %s, not of %s", TypeV2, Type)
	case c.Type == Type && c.AuditPrev != nil:
		return reject.New(reject.UnknownField, "claim.audit_prev", "a member of %s, not of %s", TypeV2, Type)
	case c.Type == TypeV2 && !v2:
		return reject.New(reject.NonCanonical, "claim.type", "a claim with neither record nor audit_prev is %s", Type)
	case c.Type != Type && c.Type != TypeV2:
		return reject.New(reject.Unrecognised, "claim.type", "%q, want %q, %q, %q or %q", c.Type, Type, TypeV2, TypeV3, TypeV4)
	}
	return c.validateRest()
}

// validateV4 checks what /4 adds, then the rest.
func (c *Claim) validateV4() error {
	member := "claim.evidence"
	if c.Evidence == nil {
		member = "claim.locality"
	}
	switch e := c.Evidence; {
	case c.Type != TypeV4:
		return reject.New(reject.UnknownField, member, "a member of %s, not of %s", TypeV4, c.Type)
	case e == nil && c.Locality != nil:
		return reject.New(reject.MissingField, "claim.evidence", "a locality claim is sealed with the evidence that binds its host key")
	case e == nil:
		return reject.New(reject.NonCanonical, "claim.type", "a claim without evidence is %s, %s or %s", Type, TypeV2, TypeV3)
	case e.Provider == "" || e.Kind == "":
		return reject.New(reject.MissingField, "claim.evidence", "evidence names its provider and its kind")
	case e.Report.IsZero():
		return reject.New(reject.MissingField, "claim.evidence.report", "the zero address names no report")
	case e.Devices != nil && e.Devices.IsZero():
		return reject.New(reject.MissingField, "claim.evidence.devices", "the zero address names no device evidence")
	case e.Software != (e.Kind == "software"):
		return reject.New(reject.Invalid, "claim.evidence.software", "software is true exactly for evidence of kind software")
	case c.JCP != nil && c.JCP.IsZero():
		return reject.New(reject.MissingField, "claim.jcp", "the zero address names no decision")
	case c.Tier.Chosen < tier.S6:
		return reject.New(reject.Invalid, "claim.evidence", "evidence is sealed into S6 and S7 runs, not %s", c.Tier.Chosen)
	}
	if l := c.Locality; l != nil {
		switch {
		case l.Claim.IsZero():
			return reject.New(reject.MissingField, "claim.locality.claim", "the zero address names no locality claim")
		case l.Region == "":
			return reject.New(reject.MissingField, "claim.locality.region", "a locality claim is for a named region")
		case c.Tier.Chosen != tier.S7:
			return reject.New(reject.Invalid, "claim.locality", "a locality claim is sealed into S7 runs, not %s", c.Tier.Chosen)
		}
	}
	return c.validateRest()
}

// validateRest checks the members every version has.
func (c *Claim) validateRest() error {
	if c.Record != nil && (c.Record.Genesis.IsZero() || c.Record.Head.IsZero()) {
		return reject.New(reject.MissingField, "claim.record", "a record is cited by its genesis and a head, neither the zero address")
	}
	if c.AuditPrev != nil && c.AuditPrev.IsZero() {
		return reject.New(reject.MissingField, "claim.audit_prev", "the zero address names no head")
	}
	// In the claim's order, so that a claim with two zero addresses is
	// refused naming the same one each time.
	for _, f := range []struct {
		name string
		a    addr.Addr
	}{{"unit", c.Unit}, {"image", c.Image}, {"grants", c.Grants}, {"decisions", c.Decisions}, {"receipt", c.Receipt}} {
		name, a := f.name, f.a
		if a.IsZero() {
			return reject.New(reject.MissingField, "claim."+name, "a claim binds its %s by address", name)
		}
	}
	if c.Journal != nil && c.Journal.IsZero() {
		// The zero address means absent, and an absent optional member is
		// left out (canonical.md).
		return reject.New(reject.NonCanonical, "claim.journal", "the zero address; an absent journal is left out")
	}
	if !c.Tier.Required.Valid() || !c.Tier.Chosen.Valid() {
		return reject.New(reject.Invalid, "claim.tier", "tiers must be S0..S7")
	}
	if c.Tier.Reason == "" {
		return reject.New(reject.MissingField, "claim.tier.reason", "the claim says why the tier was chosen")
	}
	if c.Tier.Chosen < c.Tier.Required && !(c.Tier.Chosen == tier.S0 && c.Tier.Required == tier.S1) {
		return reject.New(reject.Invalid, "claim.tier", "chosen %s is below required %s", c.Tier.Chosen, c.Tier.Required)
	}
	if c.Executor == "" {
		return reject.New(reject.MissingField, "claim.executor", "the claim names its executor")
	}
	if c.Hardware.Host.OS == "" || c.Hardware.Host.Arch == "" {
		return reject.New(reject.MissingField, "claim.hardware.host", "os and arch are required")
	}
	for i, d := range c.Hardware.Devices {
		if !d.Class.Valid() {
			return reject.New(reject.Invalid, fmt.Sprintf("claim.hardware.devices[%d].class", i), "unknown class %q", d.Class)
		}
		if d.Model == "" || d.Driver == "" {
			return reject.New(reject.MissingField, fmt.Sprintf("claim.hardware.devices[%d]", i), "model and driver are required")
		}
	}
	if !c.Outcome.Status.valid() {
		return reject.New(reject.Invalid, "claim.outcome.status", "unknown status %q", c.Outcome.Status)
	}
	if (c.Outcome.Status == Exited) != (c.Outcome.ExitCode != nil) {
		return reject.New(reject.Invalid, "claim.outcome.exit_code", "an exit code is given exactly when the status is exited")
	}
	if c.Notes != nil && len(c.Notes) == 0 {
		return reject.New(reject.NonCanonical, "claim.notes", "an empty array; no notes are written by leaving the member out")
	}
	for i, n := range c.Notes {
		if n == "" {
			return reject.New(reject.Invalid, fmt.Sprintf("claim.notes[%d]", i), "an empty note")
		}
	}
	start, err := time.Parse(TimeLayout, c.Started)
	if err != nil {
		return reject.New(reject.Invalid, "claim.started", "want %s: %v", TimeLayout, err)
	}
	end, err := time.Parse(TimeLayout, c.Ended)
	if err != nil {
		return reject.New(reject.Invalid, "claim.ended", "want %s: %v", TimeLayout, err)
	}
	if end.Before(start) {
		return reject.New(reject.Invalid, "claim.ended", "the run ends before it starts")
	}
	return nil
}

// Attestation is a verified (or freshly sealed) attestation.
type Attestation struct {
	Claim     Claim
	Addr      addr.Addr // BLAKE3 of ClaimJCS
	ClaimJCS  []byte
	Signature []byte
	Envelope  []byte // the file's bytes
}

type envelope struct {
	Claim     json.RawMessage `json:"claim"`
	Signature string          `json:"signature"`
}

// SignedMessage returns the bytes an attestation's signature covers,
// given the claim's canonical bytes: the claim itself, as seed 001 says
// ("Ed25519 over JCS-canonicalized JSON, the same primitive as ARL-S"),
// so that any Ed25519-over-JCS verifier can check it. The claim's "type"
// member separates its domain.
func SignedMessage(claim []byte) []byte { return claim }

// Seal signs c with k. It sets c.Type and c.Signer and refuses a claim that
// Validate refuses.
func Seal(c Claim, k key.Private) (*Attestation, error) {
	c.Type = Type
	if c.Record != nil || c.AuditPrev != nil {
		c.Type = TypeV2
	}
	if c.JCP != nil {
		c.Type = TypeV3
	}
	if c.Evidence != nil || c.Locality != nil {
		c.Type = TypeV4
	}
	c.Signer = k.Public()
	if c.Hardware.Devices == nil {
		c.Hardware.Devices = []Device{}
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("attest: refusing to seal: %w", err)
	}
	claim, err := jcs.Marshal(c)
	if err != nil {
		return nil, err
	}
	sig := k.Sign(SignedMessage(claim))
	env, err := jcs.Marshal(envelope{Claim: claim, Signature: base64.RawURLEncoding.EncodeToString(sig)})
	if err != nil {
		return nil, err
	}
	return &Attestation{Claim: c, Addr: addr.Of(claim), ClaimJCS: claim, Signature: sig, Envelope: env}, nil
}

// splitEnvelope takes a canonical envelope apart. A canonical envelope with
// exactly the two members is {"claim":{...},"signature":"..."}, and base64url
// holds no quote, so the fast path slices it; anything else takes the strict
// decoder, which names what is wrong.
func splitEnvelope(b []byte) (envelope, error) {
	const head, mid, tail = `{"claim":`, `,"signature":"`, `"}`
	if bytes.HasPrefix(b, []byte(head)) && bytes.HasSuffix(b, []byte(tail)) {
		if i := bytes.LastIndex(b, []byte(mid)); i > len(head) {
			sig := b[i+len(mid) : len(b)-len(tail)]
			claim := b[len(head):i]
			if bytes.IndexByte(sig, '"') < 0 && jcs.OneValue(claim) {
				return envelope{Claim: claim, Signature: string(sig)}, nil
			}
		}
	}
	var env envelope
	err := jcs.Decode(b, &env)
	return env, err
}

// decode reads an envelope strictly: canonical JSON (jcs.Check), exactly
// a claim object and a signature, and a claim whose members are its
// type's, each in its one spelling (jcs.Decode). An envelope as Seal
// writes it takes the one-pass fastEnvelope, which accepts nothing the
// strict path refuses and decodes the same claim.
func decode(b []byte) (Claim, envelope, error) {
	if c, claim, sig, ok := fastEnvelope(b); ok {
		return c, envelope{Claim: claim, Signature: sig}, nil
	}
	if err := jcs.Check(b); err != nil {
		return Claim{}, envelope{}, err
	}
	env, err := splitEnvelope(b)
	if err != nil {
		return Claim{}, envelope{}, err
	}
	if len(env.Claim) == 0 || env.Claim[0] != '{' {
		return Claim{}, envelope{}, reject.New(reject.MissingField, "claim", "the envelope carries a claim object")
	}
	if env.Signature == "" {
		return Claim{}, envelope{}, reject.New(reject.MissingField, "signature", "the envelope carries a signature")
	}
	var c Claim
	if err := jcs.Decode(env.Claim, &c); err != nil {
		return Claim{}, envelope{}, reject.In("claim", err)
	}
	return c, env, nil
}

// Verify checks an attestation envelope: canonical form, claim fields,
// signature, and that the signer is in trust. On an untrusted signer it
// returns the attestation together with the reject.UntrustedKey error.
// All errors are *reject.Error.
func Verify(b []byte, trust key.Trust) (*Attestation, error) {
	c, env, err := decode(b)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(env.Signature)
	if err != nil {
		return nil, reject.New(reject.Malformed, "signature", "not unpadded base64url: %v", err)
	}
	if err := c.Signer.Check(); err != nil {
		return nil, reject.Wrap(reject.WeakKey, "claim.signer", err)
	}
	if err := key.CheckSignature(sig); err != nil {
		return nil, reject.Wrap(reject.Signature, "signature", err)
	}
	if !c.Signer.Verify(SignedMessage(env.Claim), sig) {
		return nil, reject.New(reject.Signature, "signature", "does not verify under %s", c.Signer)
	}
	a := &Attestation{Claim: c, Addr: addr.Of(env.Claim), ClaimJCS: env.Claim, Signature: sig, Envelope: b}
	if !trust.Trusts(c.Signer) {
		return a, reject.New(reject.UntrustedKey, "claim.signer", "valid signature by %s (id %s), which is not a trusted key", c.Signer, c.Signer.ID())
	}
	return a, nil
}
