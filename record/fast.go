package record

import (
	"bytes"
	"encoding/hex"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/addr"
)

// fastSegment decodes a segment written exactly as Bytes writes one, by
// matching its canonical form byte for byte: the common case of a
// verification, a few hundred nanoseconds a line. Anything else (an
// escape in a string, a zero address, any other layout) is left to
// ParseSegment, which accepts the same lines and names what is wrong
// with the others (FuzzFastSegment holds the two to that).
func fastSegment(b []byte) (Segment, bool) {
	switch {
	case bytes.HasPrefix(b, fastExecuted):
		a, rest, ok := fastAddr(b[len(fastExecuted):])
		if !ok || string(rest) != `","kind":"executed"}` {
			return Segment{}, false
		}
		return Segment{Kind: Executed, Attestation: a}, true
	case bytes.HasPrefix(b, fastSuspended):
		s, rest, ok := fastSnapshot(b[len(fastSuspended):])
		if !ok || string(rest) != "}" {
			return Segment{}, false
		}
		return Segment{Kind: Suspended, Snapshot: s}, true
	case bytes.HasPrefix(b, fastResumed):
		prov, rest, ok := fastString(b[len(fastResumed):])
		if !ok || !provenance(prov) || !bytes.HasPrefix(rest, []byte(`,"idle_uj":`)) {
			return Segment{}, false
		}
		uj, rest, ok := fastUint(rest[len(`,"idle_uj":`):])
		if !ok || !bytes.HasPrefix(rest, []byte(`,"kind":"resumed","snapshot":`)) {
			return Segment{}, false
		}
		s, rest, ok := fastSnapshot(rest[len(`,"kind":"resumed","snapshot":`):])
		if !ok || string(rest) != "}" {
			return Segment{}, false
		}
		return Segment{Kind: Resumed, Snapshot: s, IdleUJ: uj, IdleProvenance: prov}, true
	case string(b) == `{"kind":"closed"}`:
		return Segment{Kind: Closed}, true
	case bytes.HasPrefix(b, fastClosedReason):
		r, rest, ok := fastString(b[len(fastClosedReason):])
		if !ok || r == "" || string(rest) != "}" {
			return Segment{}, false
		}
		return Segment{Kind: Closed, Reason: r}, true
	}
	return Segment{}, false
}

var (
	fastExecuted     = []byte(`{"attestation":"`)
	fastSuspended    = []byte(`{"kind":"suspended","snapshot":`)
	fastResumed      = []byte(`{"idle_provenance":"`)
	fastClosedReason = []byte(`{"kind":"closed","reason":"`)
)

// fastAddr reads "b3:" and 64 lowercase hex digits of a non-zero address.
func fastAddr(b []byte) (addr.Addr, []byte, bool) {
	var a addr.Addr
	if len(b) < 67 || string(b[:3]) != "b3:" {
		return a, nil, false
	}
	for _, c := range b[3:67] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return a, nil, false
		}
	}
	hex.Decode(a[:], b[3:67])
	if a.IsZero() {
		return a, nil, false
	}
	return a, b[67:], true
}

// fastSnapshot reads a snapshot object in its canonical form.
func fastSnapshot(b []byte) (Snapshot, []byte, bool) {
	var s Snapshot
	var ok bool
	if !bytes.HasPrefix(b, []byte(`{"manifest":"`)) {
		return s, nil, false
	}
	if s.Manifest, b, ok = fastAddr(b[len(`{"manifest":"`):]); !ok {
		return s, nil, false
	}
	if bytes.HasPrefix(b, []byte(`","memory":"`)) {
		m, rest, ok := fastAddr(b[len(`","memory":"`):])
		if !ok {
			return s, nil, false
		}
		s.Memory, b = &m, rest
	}
	if !bytes.HasPrefix(b, []byte(`","root":"`)) {
		return s, nil, false
	}
	if s.Root, b, ok = fastAddr(b[len(`","root":"`):]); !ok || !bytes.HasPrefix(b, []byte(`"}`)) {
		return s, nil, false
	}
	return s, b[2:], true
}

// fastString reads a string's content up to its closing quote, where it
// holds nothing JCS would escape (no quote, backslash or control
// character) and is UTF-8.
func fastString(b []byte) (string, []byte, bool) {
	for i, c := range b {
		switch {
		case c == '"':
			if !utf8.Valid(b[:i]) {
				return "", nil, false
			}
			return string(b[:i]), b[i+1:], true
		case c == '\\' || c < 0x20:
			return "", nil, false
		}
	}
	return "", nil, false
}

// fastUint reads an integer in its canonical form, below 2^53.
func fastUint(b []byte) (uint64, []byte, bool) {
	n, i := uint64(0), 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i == 16 || (i == 1 && b[0] == '0') {
			return 0, nil, false
		}
		n = n*10 + uint64(b[i]-'0')
	}
	if i == 0 || n > MaxIdleUJ {
		return 0, nil, false
	}
	return n, b[i:], true
}
