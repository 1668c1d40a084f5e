// Package detcbor is the deterministic CBOR of sealed records: RFC 8949 section
// 4.2.1, "core deterministic encoding".
//
// Check walks raw bytes once and refuses, with the byte offset, anything that
// is not one well-formed, core-deterministic data item: a head whose argument
// is not in its shortest form, an indefinite length, a float that a shorter
// float represents exactly, map keys that are not in strictly increasing
// bytewise order of their encodings (equal keys are reported as duplicates),
// invalid UTF-8 in a text string, reserved additional-information values,
// nesting deeper than MaxDepth, and trailing bytes. The fxamacker/cbor decoder
// has no mode that refuses non-deterministic input, which is why this exists.
//
// Marshal encodes with fxamacker/cbor's CoreDetEncOptions. Unmarshal runs
// Check, decodes strictly (unknown fields and duplicate keys refused), then
// re-encodes and requires the same bytes, so a value that does not survive a
// round trip is refused too.
package detcbor
