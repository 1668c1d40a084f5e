package spdm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// The opaque data types of NVIDIA's that this package reads; the others
// are kept as bytes in NVIDIA.Items.
const (
	OpaqueDriverVersion = 3  // the driver's version, NUL-terminated ASCII
	OpaqueVBIOSVersion  = 6  // the VBIOS version, 8 bytes
	OpaqueFWID          = 20 // the firmware identity, a SHA-384 digest
)

// OpaqueItem is one item of NVIDIA's opaque data: a type and its bytes.
type OpaqueItem struct {
	Type  uint16
	Value []byte
}

// NVIDIA is what an NVIDIA GPU states in a response's opaque data: a
// list of items, each a 2-byte type, a 2-byte size (little-endian) and
// that many bytes. Like the measurements, it is covered by the
// signature; unlike them, SPDM does not define it.
type NVIDIA struct {
	// Items are all the items, in order.
	Items []OpaqueItem
	// DriverVersion is the driver's version ("550.90.07"), or "".
	DriverVersion string
	// VBIOSVersion is the VBIOS version the way nvidia-smi prints it
	// ("96.00.9F.00.01"), or "".
	VBIOSVersion string
	// FWID is the digest of the firmware that holds the attestation key,
	// or nil. Verify checks it against the leaf certificate's.
	FWID []byte
}

// parseNVIDIA reads b as NVIDIA's opaque items, or returns nil where b
// is not such a list (another vendor's opaque data, say): every item
// whole, the list ending with the data, no type twice.
func parseNVIDIA(b []byte) *NVIDIA {
	if len(b) == 0 {
		return nil
	}
	n := &NVIDIA{}
	seen := map[uint16]bool{}
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return nil
		}
		t, size := binary.LittleEndian.Uint16(b[off:]), int(binary.LittleEndian.Uint16(b[off+2:]))
		off += 4
		if len(b)-off < size || seen[t] {
			return nil
		}
		seen[t] = true
		v := b[off : off+size]
		off += size
		n.Items = append(n.Items, OpaqueItem{Type: t, Value: v})
		switch t {
		case OpaqueDriverVersion:
			n.DriverVersion = printable(v)
		case OpaqueVBIOSVersion:
			n.VBIOSVersion = vbios(v)
		case OpaqueFWID:
			if len(v) == 48 {
				n.FWID = v
			}
		}
	}
	return n
}

// printable is b up to its first NUL if that is printable ASCII, or "".
func printable(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	for _, c := range b {
		if c < 0x20 || c > 0x7E {
			return ""
		}
	}
	return string(b)
}

// vbios formats NVIDIA's 8-byte VBIOS version: the first four bytes
// little-endian, then the fifth (00 9f 00 96 01 00 00 00 is
// 96.00.9F.00.01).
func vbios(b []byte) string {
	if len(b) != 8 {
		return ""
	}
	var s strings.Builder
	for i := 3; i >= 0; i-- {
		fmt.Fprintf(&s, "%02X.", b[i])
	}
	fmt.Fprintf(&s, "%02X", b[4])
	return s.String()
}
