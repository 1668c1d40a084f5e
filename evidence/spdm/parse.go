package spdm

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// The sizes and limits of the messages this package reads.
const (
	// Version11 is SPDM 1.1 (DSP0274 1.1), the only version read.
	Version11 = 0x11
	// NonceSize is the size of an SPDM nonce.
	NonceSize = 32
	// RequestSize is the size of a GET_MEASUREMENTS request that asks
	// for a signature: four header bytes, the nonce, the slot.
	RequestSize = 4 + NonceSize + 1
	// SignatureSize is the size of an ECDSA P-384 signature, r ‖ s, each
	// 48 bytes big-endian: the only algorithm verified.
	SignatureSize = 96
	// MaxResponse is the largest MEASUREMENTS response read; a larger one
	// is refused (ErrTooLarge) before any of it is looked at.
	MaxResponse = 1 << 20
	// MaxOpaque is the most opaque data SPDM 1.1 allows a response.
	MaxOpaque = 1024

	codeGetMeasurements = 0xE0
	codeMeasurements    = 0x60
	dmtfSpecification   = 0x01
)

// Request is a GET_MEASUREMENTS request (DSP0274 1.1 §10.11.1) that asks
// for a signed response.
type Request struct {
	// Version is the SPDM version byte (0x11).
	Version uint8
	// Operation is Param2: 0 asks for the number of measurements, 0xFF
	// for all of them, another value for the one with that index.
	Operation uint8
	// Nonce is the requester's nonce. The signature covers it, so it is
	// what binds the response to this request: a verifier that chose it
	// knows the evidence is fresh.
	Nonce [NonceSize]byte
	// Slot is the certificate slot (0-7) whose chain signs the response.
	Slot uint8
}

// Response is a MEASUREMENTS response (DSP0274 1.1 §10.11.2) with its
// signature.
type Response struct {
	// Version is the SPDM version byte; it is the request's.
	Version uint8
	// Total is Param1: the number of measurement indices the device has
	// when the request's Operation is 0, reserved otherwise.
	Total uint8
	// Slot is the certificate slot the responder signed with; it is the
	// request's.
	Slot uint8
	// Blocks are the measurement blocks, in the response's order.
	Blocks []Block
	// Nonce is the responder's nonce.
	Nonce [NonceSize]byte
	// Opaque is the opaque data, as sent.
	Opaque []byte
	// NVIDIA is the opaque data read as NVIDIA's list of items, or nil
	// where it is not such a list.
	NVIDIA *NVIDIA
	// Signature is r ‖ s of an ECDSA P-384 signature over SHA-384 of the
	// request and the response up to the signature.
	Signature [SignatureSize]byte
}

// ValueType is the kind of a DMTF measurement value (bits 6:0 of
// DMTFSpecMeasurementValueType).
type ValueType uint8

// The value types SPDM 1.1 defines.
const (
	ImmutableROM        ValueType = 0
	MutableFirmware     ValueType = 1
	HardwareConfig      ValueType = 2
	FirmwareConfig      ValueType = 3
	MeasurementManifest ValueType = 4
)

// String names the value type as DSP0274 does.
func (t ValueType) String() string {
	switch t {
	case ImmutableROM:
		return "immutable-rom"
	case MutableFirmware:
		return "mutable-firmware"
	case HardwareConfig:
		return "hardware-config"
	case FirmwareConfig:
		return "firmware-config"
	case MeasurementManifest:
		return "measurement-manifest"
	}
	return fmt.Sprintf("type-%d", uint8(t))
}

// Block is one measurement block in the DMTF measurement specification.
type Block struct {
	// Index is the measurement's index (1-254).
	Index uint8
	// Type is what was measured.
	Type ValueType
	// Raw says the value is a raw bit stream, not a digest.
	Raw bool
	// Value is the measurement: a digest under the hash algorithm the
	// two sides negotiated, unless Raw.
	Value []byte
}

// Hex is the block's value in lowercase hex.
func (b Block) Hex() string { return hex.EncodeToString(b.Value) }

// Report is a parsed request and its signed response. It keeps the bytes
// it was parsed from: they are what the signature covers.
type Report struct {
	Request  Request
	Response Response

	request, response []byte
}

// Signed is the message the signature is over: the request, then the
// response without its signature. Parse has checked that both are whole.
func (r *Report) Signed() (request, response []byte) {
	return r.request, r.response[:len(r.response)-SignatureSize]
}

// ParseReport reads a request followed by its response, the way NVIDIA's
// driver returns a GPU's attestation report: the request is the first
// RequestSize bytes.
func ParseReport(b []byte) (*Report, error) {
	if len(b) > RequestSize+MaxResponse {
		return nil, errorf(ErrTooLarge, "report", "%d bytes, over the limit of %d", len(b), RequestSize+MaxResponse)
	}
	if len(b) < RequestSize {
		return nil, errorf(ErrMalformed, "report", "%d bytes: shorter than a request (%d)", len(b), RequestSize)
	}
	return Parse(b[:RequestSize], b[RequestSize:])
}

// Parse reads a GET_MEASUREMENTS request and its MEASUREMENTS response.
// It is strict: SPDM 1.1 only, a request that asks for a signature, a
// response with only DMTF measurement blocks, every length exact, no
// trailing bytes, a signature of SignatureSize. It copies what it keeps.
// A refusal is an *Error naming the byte offset.
func Parse(request, response []byte) (*Report, error) {
	if len(response) > MaxResponse {
		return nil, errorf(ErrTooLarge, "response", "%d bytes, over the limit of %d", len(response), MaxResponse)
	}
	if len(request) > RequestSize {
		return nil, errorf(ErrMalformed, "request", "%d bytes: a signed GET_MEASUREMENTS request is %d", len(request), RequestSize)
	}
	r := &Report{request: clone(request), response: clone(response)}
	if err := r.parseRequest(); err != nil {
		return nil, err
	}
	if err := r.parseResponse(); err != nil {
		return nil, err
	}
	return r, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func reqAt(off int) string  { return fmt.Sprintf("request offset %d", off) }
func respAt(off int) string { return fmt.Sprintf("response offset %d", off) }

func (r *Report) parseRequest() error {
	b := r.request
	if len(b) < 4 {
		return errorf(ErrMalformed, reqAt(len(b)), "truncated: %d bytes, the header is 4", len(b))
	}
	if b[0] != Version11 {
		return errorf(ErrVersion, reqAt(0), "SPDM version %#02x; only 1.1 (0x11) is read", b[0])
	}
	if b[1] != codeGetMeasurements {
		return errorf(ErrMalformed, reqAt(1), "request code %#02x, not GET_MEASUREMENTS (0xe0)", b[1])
	}
	if b[2] != 0x01 {
		if b[2]&0x01 == 0 {
			return errorf(ErrMalformed, reqAt(2), "the request asks for no signature: unsigned measurements are no evidence")
		}
		return errorf(ErrMalformed, reqAt(2), "attributes %#02x: bits reserved in SPDM 1.1 are set", b[2])
	}
	if len(b) != RequestSize {
		return errorf(ErrMalformed, reqAt(len(b)), "truncated: %d bytes, a signed GET_MEASUREMENTS request is %d", len(b), RequestSize)
	}
	if b[36] > 7 {
		return errorf(ErrMalformed, reqAt(36), "slot %#02x: slots are 0-7", b[36])
	}
	q := &r.Request
	q.Version, q.Operation, q.Slot = b[0], b[3], b[36]
	copy(q.Nonce[:], b[4:36])
	return nil
}

func (r *Report) parseResponse() error {
	b, q, p := r.response, &r.Request, &r.Response
	if len(b) < 8 {
		return errorf(ErrMalformed, respAt(len(b)), "truncated: %d bytes, the header is 8", len(b))
	}
	if b[0] != q.Version {
		if b[0] != Version11 {
			return errorf(ErrVersion, respAt(0), "SPDM version %#02x; only 1.1 (0x11) is read", b[0])
		}
		return errorf(ErrVersion, respAt(0), "version %#02x answers a request of version %#02x", b[0], q.Version)
	}
	if b[1] != codeMeasurements {
		return errorf(ErrMalformed, respAt(1), "response code %#02x, not MEASUREMENTS (0x60)", b[1])
	}
	// Param2's low bits are the slot (DSP0274 1.1); its high bits are
	// reserved, and covered by the signature, so they are not refused.
	if b[3]&0x0F != q.Slot {
		return errorf(ErrMalformed, respAt(3), "slot %d answers a request for slot %d", b[3]&0x0F, q.Slot)
	}
	p.Version, p.Total, p.Slot = b[0], b[2], b[3]&0x0F
	n := int(b[4])
	recLen := int(b[5]) | int(b[6])<<8 | int(b[7])<<16
	off := 8
	end := off + recLen
	if end > len(b) {
		return errorf(ErrMalformed, respAt(5), "measurement record of %d bytes runs past the end (%d bytes left)", recLen, len(b)-off)
	}
	switch {
	case q.Operation == 0 && (n != 0 || recLen != 0):
		return errorf(ErrMalformed, respAt(4), "%d blocks answer a request for the count only", n)
	case q.Operation != 0 && q.Operation != 0xFF && n != 1:
		return errorf(ErrMalformed, respAt(4), "%d blocks answer a request for index %d", n, q.Operation)
	}
	seen := [256]bool{}
	p.Blocks = make([]Block, 0, n)
	for i := 0; i < n; i++ {
		if end-off < 4 {
			return errorf(ErrMalformed, respAt(off), "block %d: its header runs past the measurement record", i)
		}
		idx, spec, size := b[off], b[off+1], int(binary.LittleEndian.Uint16(b[off+2:]))
		switch {
		case idx == 0 || idx == 0xFF:
			return errorf(ErrMalformed, respAt(off), "block %d: index %d is reserved", i, idx)
		case seen[idx]:
			return errorf(ErrMalformed, respAt(off), "block %d: index %d appears twice", i, idx)
		case q.Operation != 0xFF && idx != q.Operation:
			return errorf(ErrMalformed, respAt(off), "block %d: index %d answers a request for index %d", i, idx, q.Operation)
		case spec != dmtfSpecification:
			return errorf(ErrMalformed, respAt(off+1), "block %d: measurement specification %#02x; only DMTF (0x01) is read", i, spec)
		case size < 3:
			return errorf(ErrMalformed, respAt(off+2), "block %d: measurement of %d bytes is shorter than its DMTF header", i, size)
		case end-off-4 < size:
			return errorf(ErrMalformed, respAt(off+2), "block %d: measurement of %d bytes runs past the measurement record", i, size)
		}
		seen[idx] = true
		m := b[off+4 : off+4+size]
		if vs := int(binary.LittleEndian.Uint16(m[1:])); vs != size-3 {
			return errorf(ErrMalformed, respAt(off+5), "block %d: DMTF value of %d bytes in a measurement of %d", i, vs, size)
		}
		p.Blocks = append(p.Blocks, Block{Index: idx, Type: ValueType(m[0] & 0x7F), Raw: m[0]&0x80 != 0, Value: m[3:]})
		off += 4 + size
	}
	if off != end {
		return errorf(ErrMalformed, respAt(off), "%d bytes after the last block in the measurement record", end-off)
	}
	if len(b)-off < NonceSize+2 {
		return errorf(ErrMalformed, respAt(off), "truncated: no room for the nonce and opaque length")
	}
	copy(p.Nonce[:], b[off:])
	off += NonceSize
	ol := int(binary.LittleEndian.Uint16(b[off:]))
	if ol > MaxOpaque {
		return errorf(ErrMalformed, respAt(off), "opaque data of %d bytes; SPDM 1.1 allows %d", ol, MaxOpaque)
	}
	off += 2
	if len(b)-off < ol {
		return errorf(ErrMalformed, respAt(off-2), "opaque data of %d bytes runs past the end (%d bytes left)", ol, len(b)-off)
	}
	p.Opaque = b[off : off+ol]
	p.NVIDIA = parseNVIDIA(p.Opaque)
	off += ol
	switch rest := len(b) - off; {
	case rest < SignatureSize:
		return errorf(ErrMalformed, respAt(off), "truncated: %d bytes left for a signature of %d", rest, SignatureSize)
	case rest > SignatureSize:
		return errorf(ErrMalformed, respAt(off+SignatureSize), "%d bytes after the signature", rest-SignatureSize)
	}
	copy(p.Signature[:], b[off:])
	return nil
}
