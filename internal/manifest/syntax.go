package manifest

import (
	"encoding/json"
	"fmt"

	"github.com/opensubstrate/sandbox/reject"
)

// maxDepth bounds how deeply arrays and objects nest, as encoding/json
// bounds it.
const maxDepth = 10000

// checkJSON reads b (JSON: Standard has already blanked the comments and
// trailing commas of JSONC, keeping every offset) as one JSON value and
// refuses, at the line and column of the byte at fault, anything that is
// not JSON (malformed); then, of JSON, the first object at any depth
// that names a member twice (duplicate-key, by the member's path:
// "containerEnv.A", "customizations.vscode.settings[0].a").
func checkJSON(b []byte) error {
	s := &syntaxScanner{b: b}
	s.space()
	if err := s.value("", 0); err != nil {
		return err
	}
	s.space()
	if s.i < len(b) {
		return at(b, s.i, "bytes after the object")
	}
	return s.dup
}

// syntaxScanner walks JSON text by hand, so that it knows the offset of
// every byte it refuses.
type syntaxScanner struct {
	b   []byte
	i   int
	dup error // the first member named twice
}

func (s *syntaxScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// fail refuses the byte at s.i, or the end of the input.
func (s *syntaxScanner) fail(context string) error {
	if s.i >= len(s.b) {
		return at(s.b, len(s.b), "the file ends inside its object")
	}
	return at(s.b, s.i, fmt.Sprintf("invalid character %s %s", quoteByte(s.b[s.i]), context))
}

// quoteByte writes c as the refusal names it: 'x', or '\x01' for a byte
// that does not print.
func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return fmt.Sprintf(`'\x%02x'`, c)
}

// value reads one value at path, nested depth deep.
func (s *syntaxScanner) value(path string, depth int) error {
	if s.i >= len(s.b) {
		return s.fail("")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(path, depth+1)
	case c == '[':
		return s.array(path, depth+1)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("looking for beginning of value")
}

func (s *syntaxScanner) deep(depth int) error {
	if depth > maxDepth {
		return at(s.b, s.i, fmt.Sprintf("nested more than %d deep", maxDepth))
	}
	return nil
}

func (s *syntaxScanner) object(path string, depth int) error {
	if err := s.deep(depth); err != nil {
		return err
	}
	s.i++ // {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	seen := map[string]bool{}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail("looking for beginning of object key string")
		}
		start := s.i
		name, err := s.str()
		if err != nil {
			return err
		}
		member := name
		if path != "" {
			member = path + "." + name
		}
		if seen[name] && s.dup == nil {
			line, col := position(s.b, start)
			s.dup = reject.New(reject.DuplicateKey, member, "named twice (again at line %d, column %d)", line, col)
		}
		seen[name] = true
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail("after object key")
		}
		s.i++
		s.space()
		if err := s.value(member, depth); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail("")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			return nil
		default:
			return s.fail("after object key:value pair")
		}
	}
}

func (s *syntaxScanner) array(path string, depth int) error {
	if err := s.deep(depth); err != nil {
		return err
	}
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		if err := s.value(fmt.Sprintf("%s[%d]", path, n), depth); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail("")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			return nil
		default:
			return s.fail("after array element")
		}
	}
}

// str reads a string and returns it decoded (a member name is compared
// as it reads, "\u0041" as "A").
func (s *syntaxScanner) str() (string, error) {
	start := s.i
	s.i++ // "
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			var out string
			if err := json.Unmarshal(s.b[start:s.i], &out); err != nil {
				return "", at(s.b, start, err.Error()) // cannot happen: checked above
			}
			return out, nil
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return "", s.fail("")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return "", s.fail("in \\u hexadecimal character escape")
					}
					s.i++
				}
			default:
				return "", s.fail("in string escape code")
			}
		case c < 0x20:
			return "", s.fail("in string literal")
		default:
			s.i++
		}
	}
	return "", s.fail("")
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *syntaxScanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	digits := func() error {
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return s.fail("in numeric literal")
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
		return nil
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if err := digits(); err != nil {
		return err
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if err := digits(); err != nil {
			return err
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if err := digits(); err != nil {
			return err
		}
	}
	return nil
}

func (s *syntaxScanner) literal(word string) error {
	for j := 0; j < len(word); j++ {
		if s.i >= len(s.b) || s.b[s.i] != word[j] {
			return s.fail(fmt.Sprintf("in literal %s (expecting %s)", word, quoteByte(word[j])))
		}
		s.i++
	}
	return nil
}
