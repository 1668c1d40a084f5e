// Package addr names content by its BLAKE3-256 digest.
//
// An Addr is the 32-byte BLAKE3 hash of an object's canonical bytes. Its text
// form is "b3:" followed by 64 lowercase hexadecimal digits; Parse accepts
// nothing else (no upper case, no missing prefix, no other length), so that
// one object has exactly one spelling in every record that names it.
//
// The zero Addr is not the address of anything (BLAKE3 of the empty input is
// af1349b9...); IsZero reports it, and records use it to mean "absent".
package addr
