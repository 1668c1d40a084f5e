package jcs

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// transform rewrites b, one JSON value as encoding/json writes it, in its
// JCS form: members sorted by UTF-16 code units, strings escaped as JCS
// escapes them, numbers as ECMAScript writes a double (Check then refuses
// the ones outside the profile), no white space. A member name that
// occurs twice in one object is refused (JCS has no form for it).
//
// It is RFC 8785's transform for what the profile admits, written here
// so that a program that only marshals (the thin sandbox) does not start
// the reference implementation (github.com/gowebpki/jcs, whose package
// compiles a regular expression before main); the tests hold it to that
// implementation byte for byte.
func transform(b []byte) ([]byte, error) {
	t := transformer{b: b}
	out, err := t.value(nil, 0)
	if err != nil {
		return nil, err
	}
	t.space()
	if t.i != len(b) {
		return nil, fmt.Errorf("offset %d: bytes after the value", t.i)
	}
	return out, nil
}

type transformer struct {
	b []byte
	i int
}

func (t *transformer) space() {
	for t.i < len(t.b) && isSpace(t.b[t.i]) {
		t.i++
	}
}

func (t *transformer) value(out []byte, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("offset %d: nested deeper than %d", t.i, MaxDepth)
	}
	t.space()
	if t.i >= len(t.b) {
		return nil, fmt.Errorf("offset %d: the input ends inside a value", t.i)
	}
	switch c := t.b[t.i]; {
	case c == '{':
		return t.object(out, depth)
	case c == '[':
		t.i++
		out = append(out, '[')
		t.space()
		if t.i < len(t.b) && t.b[t.i] == ']' {
			t.i++
			return append(out, ']'), nil
		}
		for {
			var err error
			if out, err = t.value(out, depth+1); err != nil {
				return nil, err
			}
			t.space()
			if t.i >= len(t.b) {
				return nil, fmt.Errorf("offset %d: the input ends inside an array", t.i)
			}
			switch t.b[t.i] {
			case ',':
				t.i++
				out = append(out, ',')
			case ']':
				t.i++
				return append(out, ']'), nil
			default:
				return nil, fmt.Errorf("offset %d: want ',' or ']' in an array", t.i)
			}
		}
	case c == '"':
		s, err := t.str()
		if err != nil {
			return nil, err
		}
		return appendString(out, s), nil
	default:
		start := t.i
		for t.i < len(t.b) && !isSpace(t.b[t.i]) && strings.IndexByte(",]}", t.b[t.i]) < 0 {
			t.i++
		}
		lit := t.b[start:t.i]
		if plainInteger(lit) || string(lit) == "true" || string(lit) == "false" || string(lit) == "null" {
			return append(out, lit...), nil // already in their one form
		}
		var v any
		if err := json.Unmarshal(lit, &v); err != nil {
			return nil, fmt.Errorf("offset %d: %q is not a JSON literal", start, lit)
		}
		switch v := v.(type) {
		case nil, bool:
			return append(out, lit...), nil
		case float64:
			return appendNumber(out, v), nil
		}
		return nil, fmt.Errorf("offset %d: %q is not a JSON literal", start, lit)
	}
}

// plainInteger reports whether lit is an integer of at most 15 digits
// without a leading zero (nor -0): its ECMAScript form is itself.
func plainInteger(lit []byte) bool {
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) == 0 || len(lit) > 15 || lit[0] == '0' && (len(lit) > 1 || neg) {
		return false
	}
	for _, c := range lit {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// appendNumber writes f as JCS does, which is ECMAScript's Number to
// String: the shortest digits that read back as f, in fixed notation for
// magnitudes from 1e-6 up to 1e21, else exponential ("1e+21", "1e-7").
func appendNumber(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0') // -0 too
	}
	format := byte('f')
	if abs := math.Abs(f); abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// e-07 is e-7 in ECMAScript.
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out
}

// object writes the object at t.i with its members sorted.
func (t *transformer) object(out []byte, depth int) ([]byte, error) {
	t.i++
	type member struct {
		name string
		val  []byte
	}
	var ms []member
	t.space()
	if t.i < len(t.b) && t.b[t.i] == '}' {
		t.i++
		return append(out, '{', '}'), nil
	}
	for {
		t.space()
		if t.i >= len(t.b) || t.b[t.i] != '"' {
			return nil, fmt.Errorf("offset %d: want a member name", t.i)
		}
		name, err := t.str()
		if err != nil {
			return nil, err
		}
		t.space()
		if t.i >= len(t.b) || t.b[t.i] != ':' {
			return nil, fmt.Errorf("offset %d: want ':' after a member name", t.i)
		}
		t.i++
		val, err := t.value(nil, depth+1)
		if err != nil {
			return nil, err
		}
		ms = append(ms, member{name, val})
		t.space()
		if t.i >= len(t.b) {
			return nil, fmt.Errorf("offset %d: the input ends inside an object", t.i)
		}
		if t.b[t.i] == '}' {
			t.i++
			break
		}
		if t.b[t.i] != ',' {
			return nil, fmt.Errorf("offset %d: want ',' or '}' in an object", t.i)
		}
		t.i++
	}
	slices.SortFunc(ms, func(a, b member) int { return compareKeys(a.name, b.name) })
	out = append(out, '{')
	for i, m := range ms {
		if i > 0 {
			if m.name == ms[i-1].name {
				return nil, fmt.Errorf("member %q occurs twice in one object", m.name)
			}
			out = append(out, ',')
		}
		out = appendString(out, m.name)
		out = append(out, ':')
		out = append(out, m.val...)
	}
	return append(out, '}'), nil
}

// str decodes the string at t.i.
func (t *transformer) str() (string, error) {
	start := t.i
	t.i++
	for t.i < len(t.b) && t.b[t.i] != '"' {
		if t.b[t.i] == '\\' {
			t.i++
		}
		t.i++
	}
	if t.i >= len(t.b) {
		return "", fmt.Errorf("offset %d: the input ends inside a string", start)
	}
	t.i++
	raw := t.b[start:t.i]
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("offset %d: a string of invalid UTF-8", start)
	}
	if !slices.ContainsFunc(raw[1:len(raw)-1], func(c byte) bool { return c == '\\' || c < 0x20 }) {
		return string(raw[1 : len(raw)-1]), nil // nothing to decode
	}
	var s string
	if err := json.Unmarshal(t.b[start:t.i], &s); err != nil {
		return "", fmt.Errorf("offset %d: %w", start, err)
	}
	return s, nil
}

// appendString writes s as JCS does: '"' and '\' escaped, the control
// characters JSON names by their short escapes, the other control
// characters as \u00xx, everything else as its UTF-8.
func appendString(out []byte, s string) []byte {
	out = append(out, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			out = append(out, '\\', byte(r))
		case r == '\b':
			out = append(out, '\\', 'b')
		case r == '\t':
			out = append(out, '\\', 't')
		case r == '\n':
			out = append(out, '\\', 'n')
		case r == '\f':
			out = append(out, '\\', 'f')
		case r == '\r':
			out = append(out, '\\', 'r')
		case r < 0x20:
			out = append(out, '\\', 'u')
			out = append(out, lowerHex4(uint64(r))...)
		default:
			out = utf8.AppendRune(out, r)
		}
	}
	return append(out, '"')
}
