// Package vectors generates and checks the conformance pack
// (conformance/v1): positive vectors for every record type and adversarial
// negatives, each with the reject code a conforming verifier must produce.
//
// Everything is derived deterministically from fixed inputs and a published
// test key (the RFC 8032 section 7.1 test 1 seed), so regenerating the pack
// gives the same bytes; the committed pack is checked against a fresh
// generation in tests. The untrusted-key negatives are signed with the RFC
// 8032 test 2 key, which no verifier is told to trust.
package vectors
