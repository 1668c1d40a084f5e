package receipt

import (
	"bytes"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"
	"github.com/veraison/go-cose"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// COSE header labels and algorithms used by the profile.
const (
	labelAlg         = 1
	labelCrit        = 2
	labelContentType = 3
	labelKID         = 4

	// AlgEdDSA is the algorithm emitted (RFC 9053).
	AlgEdDSA = -8
	// AlgEd25519 is the fully specified Ed25519 algorithm of RFC 9864,
	// accepted on verification.
	AlgEd25519 = -19
)

// Seal signs r with k and returns the JCR-1 envelope. It sets r.Signer and
// r.Version, fills nothing else, and refuses a receipt that Validate refuses.
func Seal(r *Receipt, k key.Private) ([]byte, error) {
	r.Version = Version
	r.Signer = k.Public()
	if r.Devices == nil {
		r.Devices = []Device{}
	}
	for i := range r.Devices {
		if r.Devices[i].Readings == nil {
			r.Devices[i].Readings = []Reading{}
		}
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("receipt: refusing to seal: %w", err)
	}
	payload, err := detcbor.Marshal(r)
	if err != nil {
		return nil, err
	}
	return SealPayload(payload, k, AlgEdDSA, nil)
}

// SealPayload builds a JCR-1 envelope around payload bytes as given, with
// algorithm label alg and extra protected header labels. It checks nothing:
// it exists so that conformance generators can build envelopes that Open
// must refuse. Use Seal for receipts.
func SealPayload(payload []byte, k key.Private, alg int64, extra map[int64]any) ([]byte, error) {
	return sealAs(payload, k, alg, ContentType, extra)
}

// SealAs builds an envelope of this profile with another content type
// (the JCP objects are sealed in the JCR-1 profile), signed by k with
// EdDSA. It checks nothing about the payload.
func SealAs(payload []byte, k key.Private, contentType string) ([]byte, error) {
	return sealAs(payload, k, AlgEdDSA, contentType, nil)
}

func sealAs(payload []byte, k key.Private, alg int64, contentType string, extra map[int64]any) ([]byte, error) {
	id := k.Public().ID()
	msg := cose.NewSign1Message()
	msg.Headers.Protected[int64(labelAlg)] = cose.Algorithm(alg)
	msg.Headers.Protected[int64(labelContentType)] = contentType
	msg.Headers.Protected[int64(labelKID)] = id[:]
	for l, v := range extra {
		msg.Headers.Protected[l] = v
	}
	msg.Payload = payload
	if err := msg.Sign(nil, nil, signer{k, cose.Algorithm(alg)}); err != nil {
		return nil, fmt.Errorf("receipt: sign: %w", err)
	}
	return msg.MarshalCBOR()
}

// signer adapts key.Private to cose.Signer for either EdDSA label.
type signer struct {
	k   key.Private
	alg cose.Algorithm
}

func (s signer) Algorithm() cose.Algorithm                    { return s.alg }
func (s signer) Sign(_ io.Reader, msg []byte) ([]byte, error) { return s.k.Sign(msg), nil }

// verifier adapts key.Public to cose.Verifier for either EdDSA label.
type verifier struct {
	p   key.Public
	alg cose.Algorithm
}

func (v verifier) Algorithm() cose.Algorithm { return v.alg }
func (v verifier) Verify(msg, sig []byte) error {
	if !v.p.Verify(msg, sig) {
		return cose.ErrVerification
	}
	return nil
}

// envelope is the COSE_Sign1 array, decoded without interpretation.
type envelope struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected cbor.RawMessage
	Payload     []byte
	Signature   []byte
}

// Open verifies a JCR-1 envelope and returns its receipt. Checks, in order:
// the envelope is one core-deterministic CBOR item tagged COSE_Sign1; the
// protected header is core-deterministic and holds exactly alg (EdDSA),
// content type and kid, with no critical header (this profile defines
// none); the unprotected header is empty; the payload decodes canonically
// with no unknown fields; kid names the payload's signer; the signature
// verifies; the receipt is valid (totals included); and the signer is in
// trust. On an untrusted signer Open returns the receipt together with the
// reject.UntrustedKey error. All errors are *reject.Error.
func Open(b []byte, trust key.Trust) (*Receipt, error) {
	env, err := OpenEnvelope(b)
	if err != nil {
		return nil, err
	}
	if env.ContentType != ContentType {
		return nil, reject.New(reject.Header, "protected.content_type", "%q, want %q", env.ContentType, ContentType)
	}
	var r Receipt
	if err := detcbor.Unmarshal(env.Payload, &r); err != nil {
		return nil, reject.In("payload", err)
	}
	if err := env.Verify(r.Signer, "payload.signer"); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, reject.In("payload", err)
	}
	if !trust.Trusts(r.Signer) {
		return &r, reject.New(reject.UntrustedKey, "signer", "valid signature by %s (id %s), which is not a trusted key", r.Signer, r.Signer.ID())
	}
	return &r, nil
}

// Envelope is a COSE_Sign1 of this profile whose structure and headers
// were checked and whose signature is not yet: OpenEnvelope, then Verify
// with the key its payload names.
type Envelope struct {
	ContentType string
	KID         addr.Addr // the address of the signer's key
	Payload     []byte
	raw         []byte
	alg         cose.Algorithm
	sig         []byte
}

// OpenEnvelope checks b's structure and headers: one core-deterministic
// CBOR item tagged COSE_Sign1, a core-deterministic protected header of
// exactly alg (EdDSA), content type and kid, no critical header, an empty
// unprotected header. Errors are *reject.Error.
func OpenEnvelope(b []byte) (*Envelope, error) {
	if err := detcbor.Check(b); err != nil {
		return nil, reject.In("envelope", err)
	}
	if len(b) < 2 || b[0] != 0xd2 || b[1] != 0x84 {
		return nil, reject.New(reject.Malformed, "envelope", "not a tagged COSE_Sign1 (want tag 18 around an array of 4)")
	}
	var env envelope
	if err := cbor.Unmarshal(b[1:], &env); err != nil {
		return nil, reject.New(reject.Malformed, "envelope", "COSE_Sign1 is [bstr, map, bstr, bstr]: %v", err)
	}
	alg, ct, kid, err := checkHeaders(env)
	if err != nil {
		return nil, err
	}
	return &Envelope{ContentType: ct, KID: kid, Payload: env.Payload, raw: b, alg: alg, sig: env.Signature}, nil
}

// Verify checks that kid names signer, that signer is not a weak key
// (refused at where), and that the signature is canonical and verifies
// under it. Errors are *reject.Error.
func (e *Envelope) Verify(signer key.Public, where string) error {
	if id := signer.ID(); e.KID != id {
		return reject.New(reject.Header, "protected.kid", "kid %s does not name the payload's signer (%s)", e.KID, id)
	}
	if err := signer.Check(); err != nil {
		return reject.Wrap(reject.WeakKey, where, err)
	}
	if err := key.CheckSignature(e.sig); err != nil {
		return reject.Wrap(reject.Signature, "signature", err)
	}
	var msg cose.Sign1Message
	if err := msg.UnmarshalCBOR(e.raw); err != nil {
		return reject.New(reject.Malformed, "envelope", "%v", err)
	}
	if err := msg.Verify(nil, verifier{signer, e.alg}); err != nil {
		return reject.New(reject.Signature, "signature", "does not verify under %s", signer)
	}
	return nil
}

// checkHeaders enforces the header profile and returns the algorithm and
// the kid.
func checkHeaders(env envelope) (cose.Algorithm, string, addr.Addr, error) {
	var kid addr.Addr
	if err := detcbor.Check(env.Protected); err != nil {
		return 0, "", kid, reject.In("protected header", err)
	}
	var p map[int64]cbor.RawMessage
	if err := cbor.Unmarshal(env.Protected, &p); err != nil {
		return 0, "", kid, reject.New(reject.Header, "protected", "must be a map with integer labels: %v", err)
	}
	if _, ok := p[labelCrit]; ok {
		var crit []any
		_ = cbor.Unmarshal(p[labelCrit], &crit)
		return 0, "", kid, reject.New(reject.UnknownCritical, "protected.crit", "critical header labels %v are not understood (this profile defines none)", crit)
	}
	for l := range p {
		if l != labelAlg && l != labelContentType && l != labelKID {
			return 0, "", kid, reject.New(reject.Header, "protected", "header label %d is not in the profile", l)
		}
	}
	if !bytes.Equal(env.Unprotected, []byte{0xa0}) {
		return 0, "", kid, reject.New(reject.Header, "unprotected", "the unprotected header must be empty")
	}
	var alg int64
	if err := cbor.Unmarshal(p[labelAlg], &alg); err != nil {
		return 0, "", kid, reject.New(reject.Alg, "protected.alg", "missing or not an integer")
	}
	if alg != AlgEdDSA && alg != AlgEd25519 {
		return 0, "", kid, reject.New(reject.Alg, "protected.alg", "algorithm %d; JCR-1 is signed with EdDSA (-8) or Ed25519 (-19)", alg)
	}
	var ct string
	if err := cbor.Unmarshal(p[labelContentType], &ct); err != nil {
		return 0, "", kid, reject.New(reject.Header, "protected.content_type", "missing or not text")
	}
	var k []byte
	if err := cbor.Unmarshal(p[labelKID], &k); err != nil || len(k) != addr.Size {
		return 0, "", kid, reject.New(reject.Header, "protected.kid", "kid must be the %d-byte address of the signer's key", addr.Size)
	}
	copy(kid[:], k)
	return cose.Algorithm(alg), ct, kid, nil
}
