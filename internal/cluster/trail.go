package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/trail"
)

// The S7 audit trail of a cluster is one chain its hosts share
// (docs/cluster.md): its entries and its head live in PostgreSQL, with
// the discipline of internal/chain (head' = BLAKE3(head ‖ entry)). One
// host writes it at a time: Hold takes its row under a lock for the
// whole of a run's sealing (the head it cites, then its entry), so no
// other entry comes between; a host that dies holding it loses its
// transaction, and with it the hold, and what it had not committed. A
// writer that waits longer than TrailWait is refused, saying so. Each
// append raises the chain's fencing token and checks the head it held
// is still the row's: a head that moved under it (the row edited by
// hand) refuses the append. Each entry is signed by the host that wrote
// it.

// TrailName is the chain's name in cluster_chains.
const TrailName = "audit"

// TrailWait bounds how long a host waits for another to release the
// trail.
const TrailWait = 60 * time.Second

// Trail is the cluster's S7 audit trail, as one member writes it.
type Trail struct {
	m *Member
	// mu: one run of this host at a time holds it (as trail.Log's), the
	// row lock keeping other hosts out.
	mu   sync.Mutex
	tx   pgx.Tx
	size int64
	head addr.Addr
}

var _ trail.Trail = (*Trail)(nil)

// Trail is the cluster's audit trail for m to write.
func (m *Member) Trail() *Trail { return &Trail{m: m} }

func trailMessage(seq int64, by string, line []byte) []byte {
	return fields("sandbox.cluster.trail/1", strconv.FormatInt(seq, 10), by, string(line))
}

// Hold takes the trail (waiting while another host holds it, at most
// TrailWait) and returns its head.
func (t *Trail) Hold(ctx context.Context) (addr.Addr, error) {
	t.mu.Lock()
	tx, err := t.m.c.pool.Begin(ctx)
	if err != nil {
		t.mu.Unlock()
		return addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	g := trail.Genesis()
	var head []byte
	err = func() error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+strconv.Itoa(int(TrailWait/time.Millisecond))+`ms'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO cluster_chains (name, size, head) VALUES ($1, 0, $2) ON CONFLICT (name) DO NOTHING`, TrailName, g[:]); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT size, head FROM cluster_chains WHERE name = $1 FOR UPDATE`, TrailName).Scan(&t.size, &head)
	}()
	if err == nil && len(head) != len(t.head) {
		err = fmt.Errorf("its head is %d bytes", len(head))
	}
	if err != nil {
		tx.Rollback(context.Background())
		t.mu.Unlock()
		return addr.Addr{}, fmt.Errorf("cluster: the audit trail (held by another host for longer than %s?): %w", TrailWait, err)
	}
	copy(t.head[:], head)
	t.tx = tx
	return t.head, nil
}

// Append adds run's entry after the head Hold gave, signed by this host,
// commits, and releases the trail.
func (t *Trail) Append(run addr.Addr, locality string) (addr.Addr, error) {
	if t.tx == nil {
		return addr.Addr{}, errors.New("cluster: the audit trail is not held")
	}
	ctx := context.Background()
	line, err := trail.EntryBytes(run, locality)
	if err != nil {
		return addr.Addr{}, err
	}
	next := chain.Step(t.head, line)
	seq, by := t.size+1, t.m.Host.ID()
	tag, err := t.tx.Exec(ctx, `UPDATE cluster_chains SET size = $2, head = $3, fence = fence + 1, writer = $4 WHERE name = $1 AND size = $5 AND head = $6`,
		TrailName, seq, next[:], by, t.size, t.head[:])
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("its head moved while this host held it: %w", ErrStaleFence)
	}
	if err == nil {
		_, err = t.tx.Exec(ctx, `INSERT INTO cluster_chain_entries (name, seq, line, by_host, sig) VALUES ($1, $2, $3, $4, $5)`,
			TrailName, seq, line, by, t.m.key.Sign(trailMessage(seq, by, line)))
	}
	if err == nil {
		err = t.tx.Commit(ctx)
	}
	t.end()
	if err != nil {
		return addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	return next, nil
}

// Release gives the trail up without an entry (a run not sealed); after
// Append it does nothing.
func (t *Trail) Release() { t.end() }

func (t *Trail) end() {
	if t.tx != nil {
		t.tx.Rollback(context.Background())
		t.tx = nil
		t.mu.Unlock()
	}
}

// TrailBytes is the cluster's audit trail as its file would be (one
// entry a line), every entry's signature checked under its writer's
// host row, and the head it replays to, which must be the row's: what
// trail.Verify checks against the heads S7 attestations cite.
func (c *Cluster) TrailBytes(ctx context.Context) ([]byte, addr.Addr, error) {
	keys := map[string][]byte{}
	hosts, err := c.Hosts(ctx)
	if err != nil {
		return nil, addr.Addr{}, err
	}
	for _, h := range hosts {
		keys[h.ID()] = h.Key[:]
	}
	var size int64
	var headB []byte
	err = c.pool.QueryRow(ctx, `SELECT size, head FROM cluster_chains WHERE name = $1`, TrailName).Scan(&size, &headB)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, trail.Genesis(), nil
	}
	if err != nil {
		return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	rows, err := c.pool.Query(ctx, `SELECT seq, line, by_host, sig FROM cluster_chain_entries WHERE name = $1 ORDER BY seq`, TrailName)
	if err != nil {
		return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	defer rows.Close()
	var b bytes.Buffer
	head := trail.Genesis()
	var n int64
	for rows.Next() {
		var (
			seq      int64
			line, sg []byte
			by       string
		)
		if err := rows.Scan(&seq, &line, &by, &sg); err != nil {
			return nil, addr.Addr{}, err
		}
		n++
		if seq != n {
			return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: entry %d where %d belongs", seq, n)
		}
		var k Host
		if pub, ok := keys[by]; !ok || len(pub) != len(k.Key) {
			return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: entry %d written by %s, no host of the cluster: %w", seq, by, ErrForged)
		} else {
			copy(k.Key[:], pub)
		}
		if !k.Key.Verify(trailMessage(seq, by, line), sg) {
			return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: entry %d's signature: %w", seq, ErrForged)
		}
		head = chain.Step(head, line)
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return nil, addr.Addr{}, err
	}
	if n != size || !bytes.Equal(head[:], headB) {
		return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: its %d entries replay to %s, its row says %d entries and another head: %w", n, head, size, ErrForged)
	}
	if _, _, err := trail.Verify(b.Bytes(), nil); err != nil {
		return nil, addr.Addr{}, fmt.Errorf("cluster: the audit trail: %w", err)
	}
	return b.Bytes(), head, nil
}
