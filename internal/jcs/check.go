package jcs

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/opensubstrate/sandbox/reject"
)

// MaxDepth is the deepest nesting of arrays and objects Check accepts.
const MaxDepth = 64

// maxSafe is 2^53 - 1, the largest integer every JCS implementation keeps.
const maxSafe = 1<<53 - 1

// Check reports whether b is one JSON value in the canonical profile
// described in the package documentation. The error is a *reject.Error whose
// Where is the byte offset of the first violation.
func Check(b []byte) error {
	s := scanner{b: b}
	if err := s.value(0); err != nil {
		return err
	}
	if s.i != len(b) {
		return s.fail(reject.NonCanonical, "trailing bytes after the value")
	}
	return nil
}

type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(code reject.Code, format string, args ...any) error {
	return reject.New(code, "offset "+strconv.Itoa(s.i), format, args...)
}

func (s *scanner) eof() error {
	return s.fail(reject.Truncated, "input ends inside a value")
}

func (s *scanner) value(depth int) error {
	if s.i >= len(s.b) {
		return s.eof()
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		return s.fail(reject.NonCanonical, "whitespace outside a string")
	default:
		return s.fail(reject.Malformed, "unexpected byte %q", c)
	}
}

func (s *scanner) literal(word string) error {
	for k := 0; k < len(word); k++ {
		if s.i >= len(s.b) {
			return s.eof()
		}
		if s.b[s.i] != word[k] {
			return s.fail(reject.Malformed, "bad literal, want %q", word)
		}
		s.i++
	}
	return nil
}

func (s *scanner) object(depth int) error {
	if depth > MaxDepth {
		return s.fail(reject.Malformed, "nesting deeper than %d", MaxDepth)
	}
	s.i++ // '{'
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	var prev string
	for n := 0; ; n++ {
		if s.i >= len(s.b) {
			return s.eof()
		}
		if s.b[s.i] != '"' {
			if isSpace(s.b[s.i]) {
				return s.fail(reject.NonCanonical, "whitespace outside a string")
			}
			return s.fail(reject.Malformed, "object member name must be a string")
		}
		at := s.i
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if n > 0 {
			switch c := compareKeys(prev, key); {
			case c == 0:
				s.i = at
				return s.fail(reject.DuplicateKey, "member %q appears twice", key)
			case c > 0:
				s.i = at
				return s.fail(reject.NonCanonical, "member %q is out of JCS order (after %q)", key, prev)
			}
		}
		prev = key
		if s.i >= len(s.b) {
			return s.eof()
		}
		if s.b[s.i] != ':' {
			return s.sepFail("':'")
		}
		s.i++
		if err := s.value(depth); err != nil {
			return err
		}
		if s.i >= len(s.b) {
			return s.eof()
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.sepFail("',' or '}'")
		}
	}
}

func (s *scanner) array(depth int) error {
	if depth > MaxDepth {
		return s.fail(reject.Malformed, "nesting deeper than %d", MaxDepth)
	}
	s.i++ // '['
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for {
		if err := s.value(depth); err != nil {
			return err
		}
		if s.i >= len(s.b) {
			return s.eof()
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.sepFail("',' or ']'")
		}
	}
}

func (s *scanner) sepFail(want string) error {
	if isSpace(s.b[s.i]) {
		return s.fail(reject.NonCanonical, "whitespace outside a string")
	}
	return s.fail(reject.Malformed, "unexpected byte %q, want %s", s.b[s.i], want)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// str scans a string at s.i and, when decode is set, returns its decoded
// value. Only the escapes JCS emits are accepted: \" \\ \b \t \n \f \r, and
// \u00xx (lowercase hex) for the other control characters.
func (s *scanner) str(decode bool) (string, error) {
	s.i++ // opening quote
	start := s.i
	escaped := false
	var out []byte
	for {
		if s.i >= len(s.b) {
			return "", s.eof()
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !decode {
				return "", nil
			}
			if !escaped {
				return string(s.b[start : s.i-1]), nil
			}
			return string(out), nil
		case c < 0x20:
			return "", s.fail(reject.NonCanonical, "control character 0x%02x must be escaped", c)
		case c == '\\':
			if !escaped {
				escaped = true
				out = append(out, s.b[start:s.i]...)
			}
			if s.i+1 >= len(s.b) {
				return "", s.eof()
			}
			e := s.b[s.i+1]
			var r byte
			switch e {
			case '"', '\\':
				r = e
			case 'b':
				r = '\b'
			case 't':
				r = '\t'
			case 'n':
				r = '\n'
			case 'f':
				r = '\f'
			case 'r':
				r = '\r'
			case 'u':
				if s.i+6 > len(s.b) {
					return "", s.eof()
				}
				h := string(s.b[s.i+2 : s.i+6])
				v, err := strconv.ParseUint(h, 16, 16)
				if err != nil {
					return "", s.fail(reject.Malformed, "bad \\u escape %q", h)
				}
				if v >= 0x20 || v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r' || h != lowerHex4(v) {
					return "", s.fail(reject.NonCanonical, "escape \\u%s is not the JCS form of that character", h)
				}
				out = append(out, byte(v))
				s.i += 6
				continue
			case '/':
				return "", s.fail(reject.NonCanonical, "escape \\/ is not the JCS form of '/'")
			default:
				return "", s.fail(reject.Malformed, "bad escape \\%c", e)
			}
			out = append(out, r)
			s.i += 2
		case c < utf8.RuneSelf:
			if escaped {
				out = append(out, c)
			}
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return "", s.fail(reject.Malformed, "invalid UTF-8")
			}
			if escaped {
				out = append(out, s.b[s.i:s.i+n]...)
			}
			s.i += n
		}
	}
}

func lowerHex4(v uint64) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12&15], digits[v>>8&15], digits[v>>4&15], digits[v&15]})
}

// number accepts only canonical integers: 0, or an optional minus sign and a
// digit string without leading zeros, of magnitude below 2^53.
func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits {
		if s.i >= len(s.b) {
			return s.eof()
		}
		return s.fail(reject.Malformed, "minus sign without digits")
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			s.i = start
			return s.fail(reject.Float, "number with a fraction or exponent; signed records carry integers only")
		}
	}
	lit := string(s.b[start:s.i])
	if s.b[digits] == '0' && s.i-digits > 1 {
		s.i = start
		// RFC 8259 has no such number: it is not JSON, so not merely
		// non-canonical.
		return s.fail(reject.Malformed, "number %s has a leading zero, which JSON does not allow", lit)
	}
	if lit == "-0" {
		s.i = start
		return s.fail(reject.NonCanonical, "-0 is written 0 in JCS")
	}
	mag := lit
	if mag[0] == '-' {
		mag = mag[1:]
	}
	if len(mag) > 16 {
		s.i = start
		return s.fail(reject.IntRange, "integer %s is at or above 2^53 in magnitude", lit)
	}
	if v, _ := strconv.ParseUint(mag, 10, 64); v > maxSafe {
		s.i = start
		return s.fail(reject.IntRange, "integer %s is at or above 2^53 in magnitude", lit)
	}
	return nil
}

// compareKeys orders member names by UTF-16 code units, as JCS requires.
// For ASCII names that is byte order; others go through UTF-16.
func compareKeys(a, b string) int {
	ascii := true
	for i := 0; i < len(a) && ascii; i++ {
		ascii = a[i] < utf8.RuneSelf
	}
	for i := 0; i < len(b) && ascii; i++ {
		ascii = b[i] < utf8.RuneSelf
	}
	if ascii {
		return strings.Compare(a, b)
	}
	return compare16(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func compare16(a, b []uint16) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}
