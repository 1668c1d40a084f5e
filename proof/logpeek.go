package proof

import (
	"encoding/base64"
	"encoding/json"

	"github.com/opensubstrate/sandbox/reject"
)

// peekEnvelope is the part of a DSSE envelope the log reads.
type peekEnvelope struct {
	PayloadType string          `json:"payloadType"`
	Payload     string          `json:"payload"`
	Signatures  json.RawMessage `json:"signatures"`
}

// peekStatement is the part of an in-toto Statement the log reads.
type peekStatement struct {
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// PeekCell reads a cell's predicate from its DSSE envelope WITHOUT
// verifying any signature: the shape a log entry must have (an
// in-toto Statement of PredicateType in an envelope of payload type
// application/vnd.in-toto+json with at least one signature). It is an
// Opener for reading a log whose trust comes from elsewhere (its
// checkpoints); a verifying Opener checks the signatures first.
func PeekCell(envelope []byte) (*Cell, error) {
	var env peekEnvelope
	if err := json.Unmarshal(envelope, &env); err != nil {
		return nil, reject.New(reject.Malformed, "envelope", "not a DSSE envelope: %v", err)
	}
	switch {
	case env.PayloadType != "application/vnd.in-toto+json":
		return nil, reject.New(reject.Invalid, "envelope.payloadType", "%q, want application/vnd.in-toto+json", env.PayloadType)
	case len(env.Signatures) == 0 || string(env.Signatures) == "null" || string(env.Signatures) == "[]":
		return nil, reject.New(reject.MissingField, "envelope.signatures", "an envelope with no signature")
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		// DSSE allows either base64 alphabet.
		if payload, err = base64.URLEncoding.DecodeString(env.Payload); err != nil {
			return nil, reject.New(reject.Malformed, "envelope.payload", "not base64")
		}
	}
	var st peekStatement
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, reject.New(reject.Malformed, "statement", "not an in-toto Statement: %v", err)
	}
	if st.PredicateType != PredicateType {
		return nil, reject.New(reject.Invalid, "statement.predicateType", "%q, want %s", st.PredicateType, PredicateType)
	}
	var c Cell
	if err := json.Unmarshal(st.Predicate, &c); err != nil {
		return nil, reject.New(reject.Invalid, "statement.predicate", "not a proof cell: %v", err)
	}
	return &c, nil
}
