package audit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Record types this package reads (linux/audit.h).
const (
	TypeUser           = 1107 // AUDIT_USER_MSG: a message from user space
	TypeLandlockAccess = 1423 // AUDIT_LANDLOCK_ACCESS: one denied request
	TypeLandlockDomain = 1424 // AUDIT_LANDLOCK_DOMAIN: a domain's creation or end
	maxFields          = 32
	maxRecordText      = 8192
)

// Record is one parsed audit record.
type Record struct {
	Type   uint16
	Serial uint64            // the event's serial: records of one event share it
	Fields map[string]string // decoded values
}

// ErrMalformed is wrapped by Parse's errors.
var ErrMalformed = errors.New("malformed audit record")

// Parse reads a record's text, `audit(SECONDS.MILLIS:SERIAL): key=value
// ...`. Values are as audit writes them: "quoted", hex (an untrusted
// string that holds a space, a quote or a control character), or bare.
// A key given twice keeps its first value.
func Parse(typ uint16, text []byte) (Record, error) {
	if len(text) > maxRecordText {
		return Record{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(text))
	}
	s := strings.TrimRight(string(text), "\x00\n")
	rest, ok := strings.CutPrefix(s, "audit(")
	if !ok {
		return Record{}, fmt.Errorf("%w: no audit(...) stamp", ErrMalformed)
	}
	stamp, rest, ok := strings.Cut(rest, "):")
	if !ok {
		return Record{}, fmt.Errorf("%w: unterminated stamp", ErrMalformed)
	}
	_, serial, ok := strings.Cut(stamp, ":")
	if !ok {
		return Record{}, fmt.Errorf("%w: stamp %q has no serial", ErrMalformed, stamp)
	}
	n, err := strconv.ParseUint(serial, 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("%w: serial %q", ErrMalformed, serial)
	}
	r := Record{Type: typ, Serial: n, Fields: map[string]string{}}
	for len(r.Fields) < maxFields {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		k, v, ok := strings.Cut(rest, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \"") {
			return r, fmt.Errorf("%w: %q is not key=value", ErrMalformed, cut(rest))
		}
		var val string
		if strings.HasPrefix(v, "\"") {
			end := strings.IndexByte(v[1:], '"')
			if end < 0 {
				return r, fmt.Errorf("%w: %s: unterminated quote", ErrMalformed, k)
			}
			val, rest = v[1:1+end], v[2+end:]
		} else if k == "msg" && strings.HasPrefix(v, "'") {
			// A user message: msg='...' to the end of the record.
			val, rest = strings.TrimSuffix(v[1:], "'"), ""
		} else {
			val, rest, _ = strings.Cut(v, " ")
			val = unhex(k, val)
		}
		if _, dup := r.Fields[k]; !dup {
			r.Fields[k] = val
		}
	}
	return r, nil
}

// untrusted are the fields audit writes with audit_log_untrustedstring:
// bare values of these are hex.
var untrusted = map[string]bool{"path": true, "comm": true, "exe": true, "ocomm": true, "name": true}

func unhex(k, v string) string {
	if !untrusted[k] || len(v)%2 != 0 || v == "" {
		return v
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return v
	}
	return string(b)
}

func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
