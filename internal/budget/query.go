package budget

import (
	"bytes"
	"sort"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/key"
)

// Policies are the admitted mint policies, by id: what an event may mint
// under.
func (l *Ledger) Policies() []*jcp.Token {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	out := make([]*jcp.Token, 0, len(l.st.policies))
	for _, p := range l.st.policies {
		out = append(out, p.tok)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0 })
	return out
}

// Checkpoints is the seq of an admitted grant's last checkpoint (0: none).
func (l *Ledger) Checkpoints(id addr.Addr) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	if g, ok := l.st.grants[id]; ok {
		return g.checkpoint
	}
	return 0
}

// Admitted says whether the grant or policy id was admitted.
func (l *Ledger) Admitted(id addr.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refresh()
	return l.st.admitted(id)
}

// SetRoots changes the root keys a root grant's issuer must be one of,
// for what is admitted from now on (what was admitted stays: a removed
// root's grants are refused by the gate's chain check, not unadmitted).
func (l *Ledger) SetRoots(t key.Trust) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.trust = t
}
