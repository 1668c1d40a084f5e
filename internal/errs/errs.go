package errs

import (
	"context"
	"errors"
	"io/fs"

	"github.com/opensubstrate/sandbox/reject"
)

// Category is the kind of a failure.
type Category int

// The categories.
const (
	Internal    Category = iota // a bug or an unexpected host failure
	Invalid                     // bad input: flags, grants, units, files
	NotFound                    // a named thing does not exist
	Integrity                   // a sealed file failed verification
	Untrusted                   // valid, but signed by a key not trusted
	Denied                      // a grant does not allow it
	Unavailable                 // a tier or device this host cannot provide
	Canceled                    // the caller stopped it
	Limit                       // over a limit of the host: too many, too large
)

var names = [...]string{"internal", "invalid", "not-found", "integrity", "untrusted", "denied", "unavailable", "canceled", "limit"}

func (c Category) String() string { return names[c] }

// Parse is the category named name (as String writes it: the API's
// "category"); an unknown name is Internal, with ok false.
func Parse(name string) (c Category, ok bool) {
	for i, n := range names {
		if n == name {
			return Category(i), true
		}
	}
	return Internal, false
}

// Of returns the category of err: by the reject codes (integrity,
// untrusted), by the category an error in its tree names itself
// (Category() string: a denial, a tier or device unavailable, a
// malformed grant), by the standard library's (not found, canceled),
// then by what an error says of itself (Invalid, Limit, Unavailable
// methods). Every package gives its errors their category there, so
// this map needs to know none of them.
func Of(err error) Category {
	var re *reject.Error
	var named interface{ Category() string }
	switch {
	case err == nil:
		return Internal
	case errors.As(err, &named):
		// An error that names its category is what it says, even around
		// a refusal of bytes (a JCP gate's denial wraps the reject).
		if c, ok := Parse(named.Category()); ok {
			return c
		}
	}
	switch {
	case errors.Is(err, reject.UntrustedKey):
		return Untrusted
	case errors.As(err, &re):
		return Integrity
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return NotFound
	case errors.Is(err, context.Canceled):
		return Canceled
	case says(err, func(e interface{ Invalid() bool }) bool { return e.Invalid() }):
		return Invalid
	case says(err, func(e interface{ Limit() bool }) bool { return e.Limit() }):
		return Limit
	case says(err, func(e interface{ Unavailable() bool }) bool { return e.Unavailable() }):
		return Unavailable
	}
	return Internal
}

// says reports whether some error in err's tree has the method of T and
// it answers true.
func says[T any](err error, yes func(T) bool) bool {
	var t T
	return errors.As(err, &t) && yes(t)
}

// ExitCode maps a category to the CLI's exit status. Guest programs' own
// statuses pass through `sandbox run` unchanged; these are for the
// sandbox's own failures and stay clear of the shell's 126-128+n range.
func ExitCode(c Category) int {
	return [...]int{
		Internal: 70, Invalid: 2, NotFound: 3, Integrity: 4, Untrusted: 5, Denied: 6, Unavailable: 7, Canceled: 130, Limit: 8,
	}[c]
}

// HTTPStatus maps a category to an HTTP status.
func HTTPStatus(c Category) int {
	return [...]int{
		Internal: 500, Invalid: 400, NotFound: 404, Integrity: 422, Untrusted: 403, Denied: 403, Unavailable: 503, Canceled: 499, Limit: 429,
	}[c]
}

// MCPCode maps a category to a JSON-RPC error code for MCP: the
// standard codes for internal and invalid, and for the rest codes of the
// implementation-defined range (-32000 to -32099) that neither the MCP
// specification (-32002 resource not found, -32042) nor its reference
// SDKs' transports (-32001, -32003 to -32005: closing, rejected) use.
func MCPCode(c Category) int {
	return [...]int{
		Internal: -32603, Invalid: -32602, NotFound: -32010, Integrity: -32011, Untrusted: -32012, Denied: -32013, Unavailable: -32014, Canceled: -32015, Limit: -32016,
	}[c]
}

// Usage marks an error as a usage error (bad flags or arguments).
type Usage struct{ Err error }

func (u Usage) Error() string { return u.Err.Error() }
func (u Usage) Unwrap() error { return u.Err }

// Invalid reports true: a usage error is invalid input.
func (u Usage) Invalid() bool { return true }

// Refused marks an error as a refusal of the caller's request by a rule
// (a JCP ledger refusing an amendment that widens): denied, whatever
// the refusal's own code.
type Refused struct{ Err error }

func (r Refused) Error() string { return r.Err.Error() }
func (r Refused) Unwrap() error { return r.Err }

// Category is denied.
func (r Refused) Category() string { return "denied" }
