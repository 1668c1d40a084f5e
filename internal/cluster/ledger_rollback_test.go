package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/budget"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
)

// rewind cuts the shared ledger back to its first n entries, as someone
// who can write the database but holds no host key can: the entries
// after n deleted, the chain's row set to the size and head the rest
// replay to (BLAKE3 over public lines: no key is needed). Every entry
// left is one a host signed, in its place.
func rewind(t *testing.T, c *Cluster, n int64) {
	t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT line FROM cluster_chain_entries WHERE name = $1 AND seq <= $2 ORDER BY seq`, LedgerName, n)
	if err != nil {
		t.Fatal(err)
	}
	head := budget.Genesis()
	var got int64
	for rows.Next() {
		var line []byte
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		head = chain.Step(head, line)
		got++
	}
	rows.Close()
	if got != n {
		t.Fatalf("%d entries to keep, want %d", got, n)
	}
	exec(t, c, `DELETE FROM cluster_chain_entries WHERE name = $1 AND seq > $2`, LedgerName, n)
	exec(t, c, `UPDATE cluster_chains SET size = $2, head = $3 WHERE name = $1`, LedgerName, n, head[:])
}

// TestSharedLedgerRollbackRefused: someone who can write the cluster's
// database, and holds no host key, deletes the ledger's last entries (a
// reservation that used up a grant's ceiling) and sets the chain's row
// to the head the rest replay to: every entry left is signed and in its
// place. The host that had seen the longer log refuses the cut one,
// saying it was rolled back, every change from then on, and again when
// it opens the ledger afresh (its mark is kept on its disk): the grant
// is never spent twice there. A host that never saw the longer log
// cannot tell (docs/cluster.md says so).
func TestSharedLedgerRollbackRefused(t *testing.T) {
	c, _ := open(t)
	a, b := join(t, c, "a"), join(t, c, "b")
	now := time.Unix(1_800_000_000, 0)
	root, _ := key.Generate(rand.Reader)
	user, _ := key.Generate(rand.Reader)
	roots := key.NewTrust(root.Public())
	mark := filepath.Join(t.TempDir(), "seen")
	la := sharedLedgerAt(t, a, roots, now, mark)

	g := rootGrant(t, root, user.Public(), 10, now)
	if err := la.Admit(g); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(la, g, 10, "inv 1", now); err != nil {
		t.Fatalf("a reserves the whole 10 J: %v", err)
	}
	rewind(t, c, 1) // back to the admission alone

	for i := range 3 {
		_, err := reserve(la, g, 10, fmt.Sprint("inv again ", i), now)
		if !errors.Is(err, reject.HeadMismatch) {
			t.Fatalf("change %d after the rollback: %v, want head-mismatch", i, err)
		}
		if i > 0 && !strings.Contains(err.Error(), "cut back or rewritten") {
			t.Fatalf("change %d after the rollback does not say why: %v", i, err)
		}
	}
	// Opened again (a restart), from its mark.
	if _, err := budget.OpenShared(a.Chain(LedgerName, budget.Genesis()), roots, nil, mark); !errors.Is(err, reject.HeadMismatch) || !strings.Contains(err.Error(), "cut back or rewritten") {
		t.Fatalf("reopened after the rollback: %v", err)
	}
	// A host that never saw the longer log replays the cut one: the
	// limit of what a host alone can know.
	lb := sharedLedger(t, b, roots, now)
	if n, _ := lb.Head(); n != 1 {
		t.Fatalf("a host that never saw it: %d entries", n)
	}
}
