package reject

import (
	"errors"
	"fmt"
)

// Code names one reason for refusing an file. A Code is itself an error,
// so errors.Is(err, reject.Signature) matches any *Error with that Code.
type Code string

// The codes. Their strings are stable and appear in conformance vectors.
const (
	// Malformed: the bytes are not the syntax they claim to be.
	Malformed Code = "malformed"
	// Truncated: the input ends inside a value.
	Truncated Code = "truncated"
	// NonCanonical: well-formed JSON that is not its own RFC 8785 (JCS)
	// form: members out of order, whitespace, other escapes or number forms.
	NonCanonical Code = "non-canonical"
	// Float: a number with a fraction or exponent in a signed JSON record.
	Float Code = "float"
	// IntRange: an integer at or above 2^53 in magnitude in signed JSON,
	// which JCS implementations would round.
	IntRange Code = "int-range"
	// NonShortest: a CBOR head whose argument is not in its shortest form.
	NonShortest Code = "cbor-non-shortest"
	// Indefinite: an indefinite-length CBOR string, array or map.
	Indefinite Code = "cbor-indefinite"
	// UnsortedKeys: CBOR map keys not in bytewise lexicographic order of
	// their encodings (RFC 8949 section 4.2.1).
	UnsortedKeys Code = "cbor-unsorted-keys"
	// DuplicateKey: a JSON object or CBOR map names the same key twice.
	DuplicateKey Code = "duplicate-key"
	// UnknownField: a field this version of the format does not define.
	UnknownField Code = "unknown-field"
	// MissingField: a field the format requires is absent.
	MissingField Code = "missing-field"
	// Invalid: a field is present but its value is not allowed.
	Invalid Code = "invalid"
	// Alg: a signature algorithm other than EdDSA (-8) or Ed25519 (-19).
	Alg Code = "alg"
	// UnknownCritical: a COSE header listed as critical that this verifier
	// does not understand.
	UnknownCritical Code = "unknown-critical"
	// Header: any other violation of the COSE header profile.
	Header Code = "header"
	// Signature: the signature does not verify under the key it names.
	Signature Code = "signature"
	// WeakKey: a signer's public key is not a canonical encoding of a
	// curve point, or is a point of small order (the identity among
	// them), under which signatures can be made without a private key.
	// Refused whether the key is trusted or not.
	WeakKey Code = "weak-key"
	// UntrustedKey: the signature verifies, but under a key the verifier
	// was not told to trust.
	UntrustedKey Code = "untrusted-key"
	// Address: content does not hash to the address a record gives for it.
	Address Code = "address"
	// TotalMismatch: a receipt total is not the sum of its readings.
	TotalMismatch Code = "total-mismatch"
	// Extended: a file is longer than the record of it, and the recorded
	// bytes are its prefix: something was appended after sealing.
	Extended Code = "extended"
	// Missing: an object a record binds is not present where it must be.
	Missing Code = "missing"
	// Unrecognised: the input is no kind of sealed file this verifier knows.
	Unrecognised Code = "unrecognised"
	// Phase: a run record's segment its phase does not allow: an
	// execution or a suspension while parked, a resumption while active.
	Phase Code = "phase"
	// Closed: a segment after a run record was closed.
	Closed Code = "closed"
	// SnapshotMismatch: a resumption whose snapshot is not, by address,
	// the one the record's last suspension recorded.
	SnapshotMismatch Code = "snapshot-mismatch"
	// ManifestMismatch: the resuming environment's manifest is not the
	// one the record's suspension recorded.
	ManifestMismatch Code = "manifest-mismatch"
	// Splice: a run record, or a continuation of one, under another unit
	// or another grant set: a new run, not this one.
	Splice Code = "splice"
	// HeadMismatch: a hash-chained log does not reach the head something
	// cites for it.
	HeadMismatch Code = "head-mismatch"

	// The codes of JCP/1 (docs/spec/jcp.md §9).
	// ChainDepth: a JCP chain of no elements or more than 64.
	ChainDepth Code = "chain-depth"
	// BrokenChain: a JCP parent, policy or grant id that does not name what it must.
	BrokenChain Code = "broken-chain"
	// UntrustedRoot: a JCP chain whose root issuer is not a trusted root key.
	UntrustedRoot Code = "untrusted-root"
	// WrongIssuer: a JCP token signed by someone not entitled to sign it.
	WrongIssuer Code = "wrong-issuer"
	// WrongAudience: a JCP grant presented, minted or checkpointed by someone it is not for.
	WrongAudience Code = "wrong-audience"
	// DepthExhausted: a JCP delegation below a grant of depth 0.
	DepthExhausted Code = "depth-exhausted"
	// WidenDepth: a JCP child grant that may delegate deeper than its parent allows.
	WidenDepth Code = "widen-depth"
	// WidenImages: a JCP child grant naming an image its parent does not.
	WidenImages Code = "widen-images"
	// WidenCeiling: a JCP child grant with a class or a ceiling its parent does not give.
	WidenCeiling Code = "widen-ceiling"
	// WidenExpiry: a JCP child grant expiring after its parent.
	WidenExpiry Code = "widen-expiry"
	// WidenModels: a JCP child grant wider than its parent's models.
	WidenModels Code = "widen-models"
	// WidenTiers: a JCP child grant wider than its parent's tiers.
	WidenTiers Code = "widen-tiers"
	// WidenHosts: a JCP child grant wider than its parent's hosts.
	WidenHosts Code = "widen-hosts"
	// WidenPaths: a JCP child grant wider than its parent's paths.
	WidenPaths Code = "widen-paths"
	// WidenRuns: a JCP child grant allowing more runs than its parent.
	WidenRuns Code = "widen-runs"
	// WidenRate: a JCP child grant allowing a faster rate than its parent.
	WidenRate Code = "widen-rate"
	// Expired: a JCP token past its expiry.
	Expired Code = "expired"
	// NotYet: a JCP token issued in the future.
	NotYet Code = "not-yet"
	// StaleInvocation: a JCP invocation more than 300 s from now.
	StaleInvocation Code = "stale-invocation"
	// Replay: a JCP invocation seen before.
	Replay Code = "replay"
	// Revoked: a JCP grant revoked, or one of its ancestors.
	Revoked Code = "revoked"
	// ImageNotGranted: a run of an image a JCP grant does not name.
	ImageNotGranted Code = "image-not-granted"
	// ModelNotGranted: a run of a model a JCP grant's models caveat does not name.
	ModelNotGranted Code = "model-not-granted"
	// TierNotGranted: a run at a tier a JCP grant's tiers caveat does not name.
	TierNotGranted Code = "tier-not-granted"
	// HostNotGranted: a run granted a network destination a JCP grant's hosts do not cover.
	HostNotGranted Code = "host-not-granted"
	// PathNotGranted: a run granted a host path a JCP grant's paths do not cover.
	PathNotGranted Code = "path-not-granted"
	// ClassNotGranted: a run using a device class a JCP grant has no ceiling for.
	ClassNotGranted Code = "class-not-granted"
	// CeilingUndeclared: a JCP-gated run using a class without declaring its budget.
	CeilingUndeclared Code = "ceiling-undeclared"
	// OverCeiling: a reservation that would exceed a JCP grant's ceiling.
	OverCeiling Code = "over-ceiling"
	// RunsExhausted: a JCP grant's run count (or a mint policy's) is spent.
	RunsExhausted Code = "runs-exhausted"
	// RateExceeded: a JCP grant's rate (or a mint policy's) is spent.
	RateExceeded Code = "rate-exceeded"
	// DoubleSpend: a JCP reservation posted or released twice.
	DoubleSpend Code = "double-spend"
	// AmendNotIssuer: a JCP amendment not by the grant's issuer, or by its audience.
	AmendNotIssuer Code = "amend-not-issuer"
	// AmendWidens: a JCP amendment that widens a term.
	AmendWidens Code = "amend-widens"
	// AmendStale: a JCP amendment out of order.
	AmendStale Code = "amend-stale"
	// EvidenceMalformed: hardware evidence that is not the structure it claims to be: wrong length, truncated, a field out of range.
	EvidenceMalformed Code = "evidence-malformed"
	// EvidenceTooLarge: hardware evidence over the size limit, refused before it is read whole.
	EvidenceTooLarge Code = "evidence-too-large"
	// EvidenceUnsupported: hardware evidence of a kind or version this verifier does not verify (it says which).
	EvidenceUnsupported Code = "evidence-unsupported"
	// EvidenceCert: an endorsement certificate that is missing, unparseable, or not the kind the evidence names (a VCEK for a VLEK-signed report).
	EvidenceCert Code = "evidence-cert"
	// EvidenceChain: an endorsement key that does not chain to the vendor root bundled for its product.
	EvidenceChain Code = "evidence-chain"
	// EvidenceExpired: a certificate of the chain not valid at the time of verification.
	EvidenceExpired Code = "evidence-expired"
	// EvidenceSignature: hardware evidence whose signature does not verify under its endorsement key.
	EvidenceSignature Code = "evidence-signature"
	// EvidenceBinding: an endorsement certificate whose chip id or TCB is not the report's.
	EvidenceBinding Code = "evidence-binding"
	// EvidenceTCB: a TCB or security version below the policy's minimum.
	EvidenceTCB Code = "evidence-tcb"
	// EvidenceVersion: a report version below the policy's minimum.
	EvidenceVersion Code = "evidence-version"
	// EvidenceDebug: a guest that allows debugging, under a policy that forbids it.
	EvidenceDebug Code = "evidence-debug"
	// EvidenceVMPL: a report from a VMPL other than the policy's.
	EvidenceVMPL Code = "evidence-vmpl"
	// EvidenceMeasurement: a measurement the policy does not allow.
	EvidenceMeasurement Code = "evidence-measurement"
	// EvidenceReportData: report_data (or a nonce) that is not the expected binding.
	EvidenceReportData Code = "evidence-report-data"
	// EvidenceHostData: host_data that is not the policy's.
	EvidenceHostData Code = "evidence-host-data"
	// EvidenceSoftware: software-grounded evidence where hardware evidence is required.
	EvidenceSoftware Code = "evidence-software"

	// The codes of locality claims (docs/spec/locality.md §7).
	// LocalityUnknownAnchor: a measurement signed by a key that is not among the published anchors.
	LocalityUnknownAnchor Code = "locality-unknown-anchor"
	// LocalityAnchorPosition: a measurement whose anchor position is not the one published for its key.
	LocalityAnchorPosition Code = "locality-anchor-position"
	// LocalityHost: a locality claim or measurement for another host key, or a host answer that does not verify.
	LocalityHost Code = "locality-host"
	// LocalityBinding: a locality claim or measurement for another run binding.
	LocalityBinding Code = "locality-binding"
	// LocalityTooFar: no measurement's bound places the host inside the claimed region.
	LocalityTooFar Code = "locality-too-far"

	// The codes of proof cells (docs/spec/proof.md §4).
	// ProofSignature: a cell's DSSE envelope has no signature that verifies under the key.
	ProofSignature Code = "proof-signature"
	// ProofSubject: a cell's subjects are not its predicate's (the substrate, the pack, each green run, by sha256 and blake3), or a run's attestation does not hash to its subject.
	ProofSubject Code = "proof-subject"
	// ProofTier: a cell's tiers are not S0 to S7, each once, in order.
	ProofTier Code = "proof-tier"
	// ProofState: a tier's state is not green, red or unavailable, or lacks what it needs (green a run, red an error, unavailable a reason).
	ProofState Code = "proof-state"
	// ProofPack: a cell's pack counts do not add up (passed and failed are the vectors).
	ProofPack Code = "proof-pack"
	// ProofRun: a green run the cell names does not verify in its run directory.
	ProofRun Code = "proof-run"
	// The codes of the proof log (docs/spec/proof.md §5).
	// ProofLogInconsistent: a proof log that does not extend a checkpoint of it: an entry removed or reordered (or the log cut short) since the checkpoint was signed.
	ProofLogInconsistent Code = "proof-log-inconsistent"
	// ProofLogForged: a proof log checkpoint whose signature does not verify under the key it names.
	ProofLogForged Code = "proof-log-forged"
	// ProofLogEdited: a proof log entry that is not the cell that was logged: its envelope does not open, or its bytes are not the leaf a proof names.
	ProofLogEdited Code = "proof-log-edited"
)

// Codes lists every code, in the order docs/spec/conformance.md tables them.
var Codes = []Code{Malformed, Truncated, NonCanonical, Float, IntRange, NonShortest, Indefinite, UnsortedKeys,
	DuplicateKey, UnknownField, MissingField, Invalid, Alg, UnknownCritical, Header, Signature, WeakKey,
	UntrustedKey, Address, TotalMismatch, Extended, Missing, Unrecognised,
	Phase, Closed, SnapshotMismatch, ManifestMismatch, Splice, HeadMismatch,
	ChainDepth, BrokenChain, UntrustedRoot, WrongIssuer, WrongAudience, DepthExhausted, WidenDepth, WidenImages, WidenCeiling, WidenExpiry, WidenModels, WidenTiers, WidenHosts, WidenPaths, WidenRuns, WidenRate, Expired, NotYet, StaleInvocation, Replay, Revoked, ImageNotGranted, ModelNotGranted, TierNotGranted, HostNotGranted, PathNotGranted, ClassNotGranted, CeilingUndeclared, OverCeiling, RunsExhausted, RateExceeded, DoubleSpend, AmendNotIssuer, AmendWidens, AmendStale,
	EvidenceMalformed, EvidenceTooLarge, EvidenceUnsupported, EvidenceCert, EvidenceChain, EvidenceExpired, EvidenceSignature, EvidenceBinding, EvidenceTCB, EvidenceVersion, EvidenceDebug, EvidenceVMPL, EvidenceMeasurement, EvidenceReportData, EvidenceHostData, EvidenceSoftware,
	LocalityUnknownAnchor, LocalityAnchorPosition, LocalityHost, LocalityBinding, LocalityTooFar,
	ProofSignature, ProofSubject, ProofTier, ProofState, ProofPack, ProofRun,
	ProofLogInconsistent, ProofLogForged, ProofLogEdited}

// Known reports whether c is one of Codes.
func Known(c Code) bool {
	for _, k := range Codes {
		if k == c {
			return true
		}
	}
	return false
}

// Error implements error, so a Code can be a target of errors.Is.
func (c Code) Error() string { return string(c) }

// Error is one refusal: what was wrong (Code), where (Where), and why.
type Error struct {
	Code   Code
	Where  string // a file, a field path such as "claim.tier.chosen", or "offset 17"
	Detail string
	Err    error // the underlying error, if any
}

// New returns an *Error with the given code, location and detail.
func New(code Code, where, format string, args ...any) *Error {
	return &Error{Code: code, Where: where, Detail: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with the given code and location around err.
func Wrap(code Code, where string, err error) *Error {
	return &Error{Code: code, Where: where, Detail: err.Error(), Err: err}
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Where != "" {
		s += ": " + e.Where
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches a target Code equal to e.Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// CodeOf returns the Code of the first *Error in err's chain, or "" if there
// is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// In returns err with where prefixed to its location, so that a nested
// decoder's "offset 3" becomes "receipt.cose: offset 3". Errors that are not
// *Error are returned unchanged.
func In(where string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	if c.Where == "" {
		c.Where = where
	} else {
		c.Where = where + ": " + c.Where
	}
	return &c
}
