package locality

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// The type tags of the wire form.
const (
	// Type is the type of a locality claim.
	Type = "sandbox.locality/1"
	// MeasurementType is the type of an anchor's signed statement.
	MeasurementType = "sandbox.locality-measurement/1"
)

// The domain separators: what an anchor and a host sign starts with one of
// these, so that neither signature can stand for the other or for any
// other record signed with the same key.
const (
	measurementContext = "sandbox.locality/1 measurement\x00"
	answerContext      = "sandbox.locality/1 answer\x00"
)

// Limits of the wire form.
const (
	// MaxClaimSize is the largest claim Parse reads, in bytes.
	MaxClaimSize = 64 << 10
	// MaxMeasurements is the most measurements a claim carries.
	MaxMeasurements = 64
	// NonceSize is the size of an anchor's nonce, in bytes.
	NonceSize = 32
)

// Hex is bytes written as lowercase hex in JSON.
type Hex []byte

// MarshalText writes h as lowercase hex.
func (h Hex) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(h)), nil }

// UnmarshalText reads lowercase hex, and nothing else.
func (h *Hex) UnmarshalText(b []byte) error {
	if bytes.ContainsAny(b, "ABCDEF") {
		return errors.New("hex digits are lowercase")
	}
	d, err := hex.DecodeString(string(b))
	if err != nil {
		return err
	}
	*h = d
	return nil
}

// Statement is what an anchor signs of one round trip: who it is and
// where, the nonce it sent, the host key that answered it and the
// binding the host signed, the host's signature, the round trip its own
// clock measured, and when.
type Statement struct {
	Type     string     `json:"type"`
	Anchor   key.Public `json:"anchor"`
	Position Position   `json:"position"`
	Nonce    Hex        `json:"nonce"`
	Host     key.Public `json:"host"`
	Binding  addr.Addr  `json:"binding"`
	HostSig  Hex        `json:"host_sig"`
	RTT      int64      `json:"rtt_us"`
	At       int64      `json:"at"`
}

// Measurement is a Statement and its anchor's Ed25519 signature over
// the measurement context and the statement's JCS bytes.
type Measurement struct {
	Statement Statement `json:"statement"`
	Signature Hex       `json:"signature"`
}

// Claim is a locality claim: that the host whose key is Host, running the
// run Binding names, was within Region, and the measurements that show it.
type Claim struct {
	Type         string        `json:"type"`
	Host         key.Public    `json:"host"`
	Binding      addr.Addr     `json:"binding"`
	Region       Region        `json:"region"`
	Measurements []Measurement `json:"measurements"`
}

// SignedBytes is what the anchor signs for s: the measurement context,
// then the statement's JCS bytes.
func (s Statement) SignedBytes() ([]byte, error) {
	b, err := jcs.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("locality: statement: %w", err)
	}
	return append([]byte(measurementContext), b...), nil
}

// AnswerBytes is what a host signs to answer an anchor's nonce: the
// answer context, the nonce, the anchor's key and the run's binding.
func AnswerBytes(nonce []byte, anchor key.Public, binding addr.Addr) []byte {
	b := make([]byte, 0, len(answerContext)+len(nonce)+64)
	b = append(b, answerContext...)
	b = append(b, nonce...)
	b = append(b, anchor[:]...)
	return append(b, binding[:]...)
}

// Sign makes a measurement of s under the anchor's key k.
func Sign(k key.Private, s Statement) (Measurement, error) {
	msg, err := s.SignedBytes()
	if err != nil {
		return Measurement{}, err
	}
	return Measurement{Statement: s, Signature: k.Sign(msg)}, nil
}

// NewClaim is the JCS bytes of a claim that host, running binding, was
// within region, shown by ms.
func NewClaim(host key.Public, binding addr.Addr, region Region, ms []Measurement) ([]byte, error) {
	c := Claim{Type: Type, Host: host, Binding: binding, Region: region, Measurements: ms}
	if err := c.check(); err != nil {
		return nil, err
	}
	b, err := jcs.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("locality: claim: %w", err)
	}
	return b, nil
}

// Parse reads a claim from untrusted bytes: at most MaxClaimSize, JCS,
// exactly the members of its type, every value in its range. It checks no
// signature; Verify does.
func Parse(b []byte) (*Claim, error) {
	if len(b) > MaxClaimSize {
		return nil, reject.New(reject.Invalid, "claim", "%d bytes; a claim is at most %d", len(b), MaxClaimSize)
	}
	var c Claim
	if err := jcs.Unmarshal(b, &c); err != nil {
		return nil, reject.In("claim", err)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

// check enforces the value rules of a claim (§3), in the spec's order.
func (c *Claim) check() error {
	if c.Type != Type {
		return reject.New(reject.Unrecognised, "claim.type", "%q, want %q", c.Type, Type)
	}
	if c.Host == (key.Public{}) {
		return reject.New(reject.MissingField, "claim.host", "the all-zero key names no host")
	}
	if c.Binding.IsZero() {
		return reject.New(reject.MissingField, "claim.binding", "the all-zero address binds nothing")
	}
	if err := c.Region.check("claim.region"); err != nil {
		return err
	}
	if n := len(c.Measurements); n < 1 || n > MaxMeasurements {
		return reject.New(reject.Invalid, "claim.measurements", "%d measurements; a claim has 1 to %d", n, MaxMeasurements)
	}
	seen := map[string]int{}
	for i, m := range c.Measurements {
		where := fmt.Sprintf("claim.measurements[%d]", i)
		if err := m.check(where); err != nil {
			return err
		}
		if j, ok := seen[string(m.Statement.Nonce)]; ok {
			return reject.New(reject.Invalid, where+".statement.nonce", "the nonce of measurements[%d] again: one round trip counts once", j)
		}
		seen[string(m.Statement.Nonce)] = i
	}
	return nil
}

// check enforces the value rules of one measurement.
func (m Measurement) check(where string) error {
	s := m.Statement
	sw := where + ".statement"
	switch {
	case s.Type != MeasurementType:
		return reject.New(reject.Unrecognised, sw+".type", "%q, want %q", s.Type, MeasurementType)
	case len(s.Nonce) != NonceSize:
		return reject.New(reject.Invalid, sw+".nonce", "%d bytes, want %d", len(s.Nonce), NonceSize)
	case len(s.HostSig) != 64:
		return reject.New(reject.Invalid, sw+".host_sig", "%d bytes, want 64", len(s.HostSig))
	case s.RTT < 1 || s.RTT > MaxRTT:
		return reject.New(reject.Invalid, sw+".rtt_us", "%d is outside [1, %d]", s.RTT, MaxRTT)
	case s.At < 0:
		return reject.New(reject.Invalid, sw+".at", "%d is before 1970", s.At)
	case len(m.Signature) != 64:
		return reject.New(reject.Signature, where+".signature", "%d bytes; an Ed25519 signature is 64", len(m.Signature))
	}
	return s.Position.check(sw + ".position")
}
