package spdm

import "fmt"

// Code names one reason this package refuses evidence. A Code is itself
// an error, so errors.Is(err, spdm.ErrSignature) matches any *Error with
// that Code. The strings are stable.
type Code string

// The codes.
const (
	// ErrTooLarge: an input over the package's size limits, refused before
	// it is read.
	ErrTooLarge Code = "spdm-too-large"
	// ErrMalformed: bytes that are not the SPDM message they claim to be: a
	// wrong request or response code, a length that does not fit,
	// trailing bytes, a measurement block this package does not read, a
	// certificate that does not parse.
	ErrMalformed Code = "spdm-malformed"
	// ErrVersion: an SPDM version other than 1.1, or a response whose
	// version is not its request's.
	ErrVersion Code = "spdm-version"
	// ErrOptions: Verify was called without what it needs (the time).
	ErrOptions Code = "spdm-options"
	// ErrChain: the certificate chain does not lead to a trusted root.
	ErrChain Code = "spdm-chain"
	// ErrExpired: a certificate of the chain is not valid at the time
	// verified at (before its NotBefore or after its NotAfter).
	ErrExpired Code = "spdm-expired"
	// ErrKey: the leaf certificate's key is not an ECDSA P-384 key allowed
	// to sign.
	ErrKey Code = "spdm-key"
	// ErrSignature: the response's signature does not verify under the
	// leaf's key over the request and the response.
	ErrSignature Code = "spdm-signature"
	// ErrFWID: the firmware identity the report states is not the one the
	// leaf certificate was issued for.
	ErrFWID Code = "spdm-fwid"
	// ErrNonce: the request's nonce is not the one the verifier expected:
	// the evidence is not fresh.
	ErrNonce Code = "spdm-nonce"
	// ErrMeasurement: a measurement is absent or not among those the
	// verifier's policy allows.
	ErrMeasurement Code = "spdm-measurement"
)

func (c Code) Error() string { return string(c) }

// Error is a refusal: its Code, where in the input (a byte offset, a
// certificate's position, an option) and what was wrong.
type Error struct {
	Code   Code
	Where  string // "response offset 40", "certificate 2", "options"
	Detail string
	Err    error // the underlying error, if any
}

func errorf(code Code, where, format string, args ...any) *Error {
	return &Error{Code: code, Where: where, Detail: fmt.Sprintf(format, args...)}
}

func wrap(code Code, where string, err error) *Error {
	return &Error{Code: code, Where: where, Detail: err.Error(), Err: err}
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Where != "" {
		s += ": " + e.Where
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches a target Code equal to e.Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// Category names the kind of failure for the module's one map of
// errors to exit codes and statuses (internal/errs), without this
// package importing it: a limit, bad options, a measurement the policy
// does not allow (denied), a chain to no trusted root (untrusted), and
// otherwise evidence that failed verification (integrity).
func (e *Error) Category() string {
	switch e.Code {
	case ErrTooLarge:
		return "limit"
	case ErrOptions:
		return "invalid"
	case ErrMeasurement:
		return "denied"
	case ErrChain:
		return "untrusted"
	}
	return "integrity"
}
