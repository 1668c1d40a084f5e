package manifest

import (
	"fmt"

	"github.com/opensubstrate/sandbox/reject"
)

// Standard turns JSONC into JSON: comments (// to the end of the line,
// /* … */) become spaces and a comma after a value and before a closing
// bracket or brace goes, outside strings; nothing else changes, so
// offsets stay where they were. A comma after no value ("[,]", ",,") is
// left for the JSON reader to refuse. An unterminated comment or string
// is refused at its line and column.
func Standard(b []byte) ([]byte, error) {
	out := make([]byte, len(b))
	copy(out, b)
	lastComma := -1 // the offset of a comma with only blanks and comments after it
	var prev byte   // the last byte before it that is neither blank nor comment
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
			i, lastComma, prev = j, -1, '"'
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
			lastComma = -1
			if prev != ',' && prev != '[' && prev != '{' && prev != ':' && prev != 0 {
				lastComma = i
			}
			prev = c
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma, prev = -1, c
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			lastComma, prev = -1, c
		}
	}
	return out, nil
}

// at is a refusal at offset off of b, by line and column.
func at(b []byte, off int, what string) error {
	line, col := position(b, off)
	return reject.New(reject.Malformed, fmt.Sprintf("line %d, column %d", line, col), "%s", what)
}

// position is the line and column, both from 1, of the byte at offset
// off of b (len(b): just past its end). A column counts bytes.
func position(b []byte, off int) (line, col int) {
	line, col = 1, 1
	for _, c := range b[:min(max(off, 0), len(b))] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}
