// Package reject names why a sealed file was refused.
//
// Every decoder and verifier in this module reports a refusal as an *Error
// carrying a Code from the closed list below, where in the input it happened
// (a file, a field path, or a byte offset) and a detail for people. Callers
// branch on the Code with errors.Is(err, reject.Signature) or CodeOf(err);
// the conformance pack names, for each adversarial vector, the Code that a
// conforming verifier must produce.
//
// Codes are part of the wire contract: they appear in conformance/v1 and are
// never renamed. New codes may be added.
package reject
