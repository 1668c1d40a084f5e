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
)

// A chain is a hash-chained log the cluster's hosts share (the S7 audit
// trail, the JCP budget ledger): its entries and its head live in
// PostgreSQL, with the discipline of internal/chain (head' = BLAKE3(head
// ‖ entry)). One host writes it at a time: Hold takes its row under a
// lock until Append commits or Release gives it up, so no other entry
// comes between what the holder read and what it appends; a host that
// dies holding it loses its transaction, and with it the hold, and
// what it had not committed. A writer that waits longer than ChainWait
// is refused, saying so. Each append raises the chain's fencing token
// and checks that the head it held is still the row's: a head that moved
// under it (the row edited by hand) refuses the append. Each entry is
// signed by the host that wrote it, and every entry read back is checked
// under its writer's host row.

// ChainWait bounds how long a host waits for another to release a chain.
const ChainWait = 60 * time.Second

// TrailWait is ChainWait, for the audit trail.
const TrailWait = ChainWait

// Chain is a shared chain, as one member writes it.
type Chain struct {
	m       *Member
	name    string
	genesis addr.Addr
	// mu: one caller of this host at a time holds it, the row lock
	// keeping other hosts out.
	mu   sync.Mutex
	tx   pgx.Tx
	size int64
	head addr.Addr
	// keys are the hosts' keys by id, as Since last read them.
	keys map[string][]byte
}

// Chain is the shared chain name, whose head before any entry is
// genesis, for m to write.
func (m *Member) Chain(name string, genesis addr.Addr) *Chain {
	return &Chain{m: m, name: name, genesis: genesis}
}

func chainMessage(name string, seq int64, by string, line []byte) []byte {
	if name == TrailName {
		// The trail's entries were signed before other chains shared
		// its tables: their messages stay as they were.
		return fields("sandbox.cluster.trail/1", strconv.FormatInt(seq, 10), by, string(line))
	}
	return fields("sandbox.cluster.chain/1", name, strconv.FormatInt(seq, 10), by, string(line))
}

// Hold takes the chain (waiting while another host holds it, at most
// ChainWait) and returns its size and head.
func (c *Chain) Hold(ctx context.Context) (uint64, addr.Addr, error) {
	c.mu.Lock()
	tx, err := c.m.c.pool.Begin(ctx)
	if err != nil {
		c.mu.Unlock()
		return 0, addr.Addr{}, fmt.Errorf("cluster: chain %s: %w", c.name, err)
	}
	var head []byte
	err = func() error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+strconv.Itoa(int(ChainWait/time.Millisecond))+`ms'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO cluster_chains (name, size, head) VALUES ($1, 0, $2) ON CONFLICT (name) DO NOTHING`, c.name, c.genesis[:]); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT size, head FROM cluster_chains WHERE name = $1 FOR UPDATE`, c.name).Scan(&c.size, &head)
	}()
	if err == nil && len(head) != len(c.head) {
		err = fmt.Errorf("its head is %d bytes: %w", len(head), ErrForged)
	}
	if err != nil {
		tx.Rollback(context.Background())
		c.mu.Unlock()
		return 0, addr.Addr{}, fmt.Errorf("cluster: chain %s (held by another host for longer than %s?): %w", c.name, ChainWait, err)
	}
	copy(c.head[:], head)
	c.tx = tx
	return uint64(c.size), c.head, nil
}

// Since is the chain's entries after the first have, each checked under
// its writer's host row; while the chain is held, as the hold sees
// them.
func (c *Chain) Since(ctx context.Context, have uint64) ([][]byte, error) {
	var q interface {
		Query(context.Context, string, ...any) (pgx.Rows, error)
	} = c.m.c.pool
	if c.tx != nil {
		q = c.tx
	}
	rows, err := q.Query(ctx, `SELECT seq, line, by_host, sig FROM cluster_chain_entries WHERE name = $1 AND seq > $2 ORDER BY seq`, c.name, int64(have))
	if err != nil {
		return nil, fmt.Errorf("cluster: chain %s: %w", c.name, err)
	}
	type row struct {
		seq      int64
		line, sg []byte
		by       string
	}
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.line, &r.by, &r.sg); err != nil {
			rows.Close()
			return nil, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(rs) == 0 {
		return nil, err
	}
	// A host's id is its key's: a key read once stays that host's.
	for _, r := range rs {
		if _, ok := c.keys[r.by]; !ok {
			if c.keys, err = c.m.c.hostKeys(ctx); err != nil {
				return nil, err
			}
			break
		}
	}
	keys := c.keys
	out := make([][]byte, len(rs))
	for i, r := range rs {
		if err := checkEntry(c.name, keys, int64(have)+int64(i)+1, r.seq, r.line, r.by, r.sg); err != nil {
			return nil, err
		}
		out[i] = r.line
	}
	return out, nil
}

// Append adds lines after the head Hold gave, each signed by this host,
// commits, and releases the chain. It returns the new head.
func (c *Chain) Append(lines ...[]byte) (addr.Addr, error) {
	if c.tx == nil {
		return addr.Addr{}, fmt.Errorf("cluster: chain %s is not held", c.name)
	}
	ctx := context.Background()
	next, size, by := c.head, c.size, c.m.Host.ID()
	for _, l := range lines {
		next = chain.Step(next, l)
	}
	size += int64(len(lines))
	tag, err := c.tx.Exec(ctx, `UPDATE cluster_chains SET size = $2, head = $3, fence = fence + 1, writer = $4 WHERE name = $1 AND size = $5 AND head = $6`,
		c.name, size, next[:], by, c.size, c.head[:])
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("its head moved while this host held it: %w", ErrStaleFence)
	}
	if err == nil && len(lines) > 0 {
		b := &pgx.Batch{}
		for i, l := range lines {
			seq := c.size + int64(i) + 1
			b.Queue(`INSERT INTO cluster_chain_entries (name, seq, line, by_host, sig) VALUES ($1, $2, $3, $4, $5)`,
				c.name, seq, l, by, c.m.key.Sign(chainMessage(c.name, seq, by, l)))
		}
		err = c.tx.SendBatch(ctx, b).Close()
	}
	if err == nil {
		err = c.tx.Commit(ctx)
	}
	c.end()
	if err != nil {
		return addr.Addr{}, fmt.Errorf("cluster: chain %s: %w", c.name, err)
	}
	return next, nil
}

// Release gives the chain up without an entry; after Append it does
// nothing.
func (c *Chain) Release() { c.end() }

func (c *Chain) end() {
	if c.tx != nil {
		c.tx.Rollback(context.Background())
		c.tx = nil
		c.mu.Unlock()
	}
}

// Bytes is the chain as its file would be, checked (ChainBytes).
func (c *Chain) Bytes(ctx context.Context) ([]byte, addr.Addr, error) {
	return c.m.c.ChainBytes(ctx, c.name, c.genesis)
}

// hostKeys is every host's key, by id.
func (c *Cluster) hostKeys(ctx context.Context) (map[string][]byte, error) {
	hosts, err := c.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	keys := map[string][]byte{}
	for _, h := range hosts {
		keys[h.ID()] = h.Key[:]
	}
	return keys, nil
}

// checkEntry checks entry n of chain name as read: in its place, and
// signed by the host it names.
func checkEntry(name string, keys map[string][]byte, n, seq int64, line []byte, by string, sig []byte) error {
	if seq != n {
		return fmt.Errorf("cluster: chain %s: entry %d where %d belongs: %w", name, seq, n, ErrForged)
	}
	var k Host
	pub, ok := keys[by]
	if !ok || len(pub) != len(k.Key) {
		return fmt.Errorf("cluster: chain %s: entry %d written by %s, no host of the cluster: %w", name, seq, by, ErrForged)
	}
	copy(k.Key[:], pub)
	if !k.Key.Verify(chainMessage(name, seq, by, line), sig) {
		return fmt.Errorf("cluster: chain %s: entry %d's signature: %w", name, seq, ErrForged)
	}
	return nil
}

// ChainBytes is chain name as its file would be (one entry a line),
// every entry's signature checked under its writer's host row, and the
// head it replays to from genesis, which must be the row's.
func (c *Cluster) ChainBytes(ctx context.Context, name string, genesis addr.Addr) ([]byte, addr.Addr, error) {
	r, err := retried(ctx, c, "chain "+name, func() (r chainRead, err error) {
		// One snapshot for the row and its entries: an entry appended
		// between two reads would not replay to the row's head.
		err = pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			r, err = readChain(ctx, tx, name)
			return err
		})
		return r, err
	})
	if err != nil || !r.found {
		return nil, genesis, err
	}
	keys, err := c.hostKeys(ctx)
	if err != nil {
		return nil, addr.Addr{}, err
	}
	var b bytes.Buffer
	head := genesis
	for i, e := range r.entries {
		if err := checkEntry(name, keys, int64(i)+1, e.seq, e.line, e.by, e.sig); err != nil {
			return nil, addr.Addr{}, err
		}
		head = chain.Step(head, e.line)
		b.Write(e.line)
		b.WriteByte('\n')
	}
	if n := int64(len(r.entries)); n != r.size || !bytes.Equal(head[:], r.head) {
		return nil, addr.Addr{}, fmt.Errorf("cluster: chain %s: its %d entries replay to %s, its row says %d entries and another head: %w", name, n, head, r.size, ErrForged)
	}
	return b.Bytes(), head, nil
}

// chainRead is a chain's row and entries as read, not yet checked.
type chainRead struct {
	found   bool
	size    int64
	head    []byte
	entries []chainEntry
}

type chainEntry struct {
	seq       int64
	line, sig []byte
	by        string
}

// readChain reads chain name's row and entries in tx.
func readChain(ctx context.Context, tx pgx.Tx, name string) (chainRead, error) {
	var r chainRead
	err := tx.QueryRow(ctx, `SELECT size, head FROM cluster_chains WHERE name = $1`, name).Scan(&r.size, &r.head)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("cluster: chain %s: %w", name, err)
	}
	r.found = true
	rows, err := tx.Query(ctx, `SELECT seq, line, by_host, sig FROM cluster_chain_entries WHERE name = $1 ORDER BY seq`, name)
	if err != nil {
		return r, fmt.Errorf("cluster: chain %s: %w", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var e chainEntry
		if err := rows.Scan(&e.seq, &e.line, &e.by, &e.sig); err != nil {
			return r, fmt.Errorf("cluster: chain %s: %w", name, err)
		}
		r.entries = append(r.entries, e)
	}
	return r, rows.Err()
}

// LedgerName is the JCP budget ledger's chain in cluster_chains.
const LedgerName = "jcp"
