package budget

import (
	"fmt"

	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// Verify checks a ledger offline, as `sandbox jcp ledger verify` does:
// it replays log from head₀ with every rule of §7, refusing the first
// entry that breaks one ("entry 17: over-ceiling: b3:….ceilings.Cpu: …"),
// and checks every signed head in heads (each note's signature by signer
// when it is not nil): the log's head after SIZE entries is HEAD, else
// head-mismatch. A final line without its newline is refused
// (truncated), and so is a final note cut short: a verifier is given a
// ledger at rest. It returns the budgets.
func Verify(log, heads []byte, roots key.Trust, signer *key.Public) (*State, error) {
	entries, torn, err := chain.Split(log)
	if err != nil {
		return nil, err
	}
	if torn > 0 {
		return nil, reject.New(reject.Truncated, fmt.Sprintf("entry %d", len(entries)+1), "%d bytes without their newline", torn)
	}
	var hs []signed
	if len(heads) > 0 {
		v, err := headsVerifier(signer)
		if err != nil {
			return nil, err
		}
		if hs, torn, err = readHeads(heads, v); err != nil {
			return nil, reject.In("heads", err)
		}
		if torn > 0 {
			return nil, reject.New(reject.Truncated, fmt.Sprintf("heads: note %d", len(hs)+1), "%d bytes of a note without its signature line", torn)
		}
	}
	return replay(entries, roots, hs)
}

func headsVerifier(signer *key.Public) (*note.Verifier, error) {
	if signer == nil {
		return nil, nil
	}
	return verifier(*signer)
}

// replay is the state after entries, each parsed and checked in turn,
// and checked against the signed heads hs.
func replay(entries [][]byte, roots key.Trust, hs []signed) (*State, error) {
	s := newState(roots)
	want := indexHeads(hs)
	if err := want.check(s.Head()); err != nil {
		return nil, err
	}
	for i, b := range entries {
		e, err := parse(b)
		if err == nil {
			err = s.check(e)
		}
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		s.step(e, b)
		if err := want.check(s.Head()); err != nil {
			return nil, err
		}
	}
	if err := want.beyond(s.size); err != nil {
		return nil, err
	}
	return s, nil
}
