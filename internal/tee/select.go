package tee

import (
	"crypto/ed25519"
	"errors"
	"fmt"
)

// Errors the providers return, wrapped with detail.
var (
	// ErrUnavailable: the provider cannot give evidence on this host;
	// the detail says why (its probe's reason). Its category is
	// unavailable.
	ErrUnavailable error = unavailable{}
	// ErrBadReport: the platform answered, with a report this package
	// will not pass on (empty, oversized, an unknown provider).
	ErrBadReport = errors.New("tee: the platform's report is not usable")
)

type unavailable struct{}

func (unavailable) Error() string { return "tee: provider unavailable" }

// Unavailable reports true: the host cannot provide it.
func (unavailable) Unavailable() bool { return true }

// Names are the providers Select knows, the default first.
var Names = []string{"configfs-tsm", "software"}

// Select returns the provider named: "" or "configfs-tsm" is
// configfs-tsm on the kernel's files under root ("" or "/": the real
// ones); "software" is the software provider signing with key, which is
// never the default and never chosen unless named, because no hardware
// vouches for its evidence. Any other name is an error that lists the
// names.
func Select(name, root string, key ed25519.PrivateKey) (Provider, error) {
	switch name {
	case "", "configfs-tsm":
		return &ConfigFS{Root: root}, nil
	case "software":
		if len(key) != ed25519.PrivateKeySize {
			return nil, errors.New("tee: the software provider needs an Ed25519 private key to sign its reports")
		}
		return &Software{Key: key}, nil
	}
	return nil, unknown{name}
}

// unknown is a name Select does not know: invalid input.
type unknown struct{ name string }

func (u unknown) Error() string {
	return fmt.Sprintf("tee: no provider %q: the providers are %q (the default) and %q (for tests, only when named)", u.name, Names[0], Names[1])
}

// Invalid reports true: the caller named a provider that does not exist.
func (unknown) Invalid() bool { return true }
