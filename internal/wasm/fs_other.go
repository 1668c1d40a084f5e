//go:build !linux

package wasm

import (
	"fmt"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// ErrNoBeneath: storage grants need openat2(RESOLVE_BENEATH), which only
// Linux has; without it S2 refuses units with storage grants.
var errNoBeneath = fmt.Errorf("storage grants in S2 need Linux openat2(RESOLVE_BENEATH): %w", errNotSupported)

func newHostFS(_ *grant.Enforcer, grants []grant.Storage, _ map[string]string, _ hostpath.Guard) (hostFS, error) {
	if len(grants) > 0 {
		return nil, errNoBeneath
	}
	return nil, nil
}

func probeOpenat2() error { return errNoBeneath }

func probeBeneath(func(parent, prefix string) (string, error)) error { return errNoBeneath }
