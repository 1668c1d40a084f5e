package proof

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// PayloadType is the DSSE payload type of a cell: an in-toto Statement
// in JSON.
const PayloadType = "application/vnd.in-toto+json"

// Envelope is a DSSE envelope (JSON form): the payload, its type, and
// the signatures over PAE(payloadType, payload). Payload and Sig are
// base64, standard or URL-safe, padded or not (DSSE accepts either).
type Envelope struct {
	PayloadType string      `json:"payloadType"`
	Payload     string      `json:"payload"`
	Signatures  []Signature `json:"signatures"`
}

// Signature is one signature of an envelope. KeyID is a hint only (the
// signing key's id, b3:…), never trusted: the signature is checked
// under the keys the verifier holds.
type Signature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   string `json:"sig"`
}

// PAE is DSSE's pre-authentication encoding of a payload's type and
// body, the bytes signed:
//
//	"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
//
// LEN being the byte length in ASCII decimal, without leading zeros.
func PAE(payloadType string, body []byte) []byte {
	b := make([]byte, 0, len("DSSEv1")+len(payloadType)+len(body)+24)
	b = append(b, "DSSEv1 "...)
	b = strconv.AppendInt(b, int64(len(payloadType)), 10)
	b = append(b, ' ')
	b = append(b, payloadType...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ' ')
	return append(b, body...)
}

// Sign makes the envelope of body, signed with k (Ed25519 over the PAE).
func Sign(k key.Private, payloadType string, body []byte) Envelope {
	return Envelope{
		PayloadType: payloadType,
		Payload:     base64.StdEncoding.EncodeToString(body),
		Signatures: []Signature{{
			KeyID: k.Public().ID().String(),
			Sig:   base64.StdEncoding.EncodeToString(k.Sign(PAE(payloadType, body))),
		}},
	}
}

// Body is the envelope's payload, decoded.
func (e Envelope) Body() ([]byte, error) {
	b, err := decode64(e.Payload)
	if err != nil {
		return nil, reject.New(reject.Malformed, "payload", "not base64: %v", err)
	}
	return b, nil
}

// Verify checks the envelope's signatures under k: nil when one of them
// is k's over the PAE of the payload, else an error with code
// proof-signature. A weak key is refused (weak-key).
func (e Envelope) Verify(k key.Public) error {
	if err := k.Check(); err != nil {
		return err
	}
	body, err := e.Body()
	if err != nil {
		return err
	}
	m := PAE(e.PayloadType, body)
	if len(e.Signatures) == 0 {
		return reject.New(ProofSignature, "signatures", "the envelope has no signature")
	}
	for i, s := range e.Signatures {
		sig, err := decode64(s.Sig)
		if err != nil {
			return reject.New(reject.Malformed, fmt.Sprintf("signatures[%d].sig", i), "not base64: %v", err)
		}
		if k.Verify(m, sig) {
			return nil
		}
	}
	return reject.New(ProofSignature, "signatures", "no signature of the envelope verifies under %s", k)
}

// The reject codes of a cell (docs/spec/proof.md §4), aliases of the
// ones in package reject.
const (
	ProofSignature = reject.ProofSignature
	ProofSubject   = reject.ProofSubject
	ProofTier      = reject.ProofTier
	ProofState     = reject.ProofState
	ProofPack      = reject.ProofPack
	ProofRun       = reject.ProofRun
)

// decode64 reads base64 in any of the forms DSSE allows: standard or
// URL-safe, padded or not.
func decode64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, err
}

// marshalEnvelope is the envelope's JSON.
func marshalEnvelope(e Envelope) ([]byte, error) {
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
