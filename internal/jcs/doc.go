// Package jcs is the canonical JSON of signed records: RFC 8785 (JCS)
// restricted to the profile this project signs.
//
// The profile: a JSON text in its own JCS form (members sorted by UTF-16 code
// units, no insignificant whitespace, strings escaped exactly as JCS escapes
// them), with no floating-point numbers and no integer of magnitude 2^53 or
// more (JCS implementations round those silently; larger counters are carried
// as strings). Check enforces the profile in one pass over the bytes and names
// the first violation with its byte offset; it never re-serialises, so what
// it accepts is exactly what gets hashed and signed.
//
// Marshal produces profile bytes from a Go value through encoding/json and
// RFC 8785's transform, then checks them; the transform is this package's
// own, held byte for byte to the reference JCS implementation
// (github.com/gowebpki/jcs) by the tests, which alone import it. Unmarshal
// checks, then decodes strictly: unknown fields are refused.
package jcs
