// Package merkle is the Merkle tree of RFC 6962 / RFC 9162 (SHA-256,
// leaf hash SHA-256(0x00 ‖ d), node hash SHA-256(0x01 ‖ l ‖ r)) that a
// fleet's aggregate receipt is (seed 000, C10): the tree hash over n
// leaves, inclusion proofs (an item is in the fleet) and consistency
// proofs (a later checkpoint extends an earlier one), made and checked
// by the algorithms of RFC 9162 §2.1.3 and §2.1.4. Tests hold it to the
// transparency-dev vectors and to real Certificate Transparency data.
//
// A proof from size 0 proves nothing and is refused, as transparency-dev
// does since 2026.
package merkle
