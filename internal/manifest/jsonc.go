package manifest

import (
	"fmt"

	"github.com/opensubstrate/sandbox/reject"
)

// Standard turns JSONC into JSON: comments (// to the end of the line,
// /* … */) become spaces and a comma before a closing bracket or brace
// goes, outside strings; nothing else changes, so offsets stay where
// they were. An unterminated comment or string is refused at its line
// and column.
func Standard(b []byte) ([]byte, error) {
	out := make([]byte, len(b))
	copy(out, b)
	lastComma := -1 // the offset of a comma with only blanks and comments after it
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			j := i + 1
			for ; j < len(out); j++ {
				if out[j] == '\\' {
					j++
					continue
				}
				if out[j] == '"' {
					break
				}
			}
			if j >= len(out) {
				return nil, at(b, i, "a string that does not end")
			}
			i, lastComma = j, -1
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			start := i
			out[i], out[i+1] = ' ', ' '
			for i += 2; ; i++ {
				if i+1 >= len(out) {
					return nil, at(b, start, "a comment that does not end")
				}
				if out[i] == '*' && out[i+1] == '/' {
					out[i], out[i+1] = ' ', ' '
					i++
					break
				}
				if out[i] != '\n' {
					out[i] = ' '
				}
			}
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma = -1
		}
	}
	return out, nil
}

// at is a refusal at offset off of b, by line and column.
func at(b []byte, off int, what string) error {
	line, col := 1, 1
	for _, c := range b[:min(off, len(b))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return reject.New(reject.Malformed, fmt.Sprintf("line %d, column %d", line, col), "%s", what)
}
