package jcp

import (
	"crypto/rand"
	"fmt"

	"github.com/opensubstrate/sandbox/internal/detcbor"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/receipt"
)

// Seal signs a payload (*Grant, *Policy, *Invocation, *Amendment,
// *Revocation, *Checkpoint or *Decision) with k: it sets the version and
// iss, a nonce where the object has one and none is set, and returns the
// token as Open reads it back (so a payload Open would refuse is never
// sealed).
func Seal(v any, k key.Private) (*Token, error) {
	pub := k.Public()
	var ct string
	var nonce *[]byte
	switch p := v.(type) {
	case *Grant:
		ct, p.V, p.Iss, nonce = TypeGrant, Version, pub, &p.Nonce
	case *Policy:
		ct, p.V, p.Iss, nonce = TypePolicy, Version, pub, &p.Nonce
	case *Invocation:
		ct, p.V, p.Iss, nonce = TypeInvocation, Version, pub, &p.Nonce
	case *Amendment:
		ct, p.V, p.Iss = TypeAmendment, Version, pub
	case *Revocation:
		ct, p.V, p.Iss = TypeRevocation, Version, pub
	case *Checkpoint:
		ct, p.V, p.Iss = TypeCheckpoint, Version, pub
	case *Decision:
		ct, p.V, p.Iss = TypeDecision, Version, pub
	default:
		return nil, fmt.Errorf("jcp: cannot seal a %T", v)
	}
	if nonce != nil && *nonce == nil {
		*nonce = make([]byte, 16)
		if _, err := rand.Read(*nonce); err != nil {
			return nil, err
		}
	}
	payload, err := detcbor.Marshal(v)
	if err != nil {
		return nil, err
	}
	b, err := receipt.SealAs(payload, k, ct)
	if err != nil {
		return nil, err
	}
	t, err := Open(b)
	if err != nil {
		return nil, fmt.Errorf("jcp: refusing to seal: %w", err)
	}
	return t, nil
}
