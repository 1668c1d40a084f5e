package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opensubstrate/sandbox/internal/store/pgstore"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// Schema names the tables this package makes.
const Schema = "sandbox.cluster/1"

const tablesSQL = `
CREATE TABLE IF NOT EXISTS cluster_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cluster_hosts (
	id TEXT PRIMARY KEY,
	pub BYTEA NOT NULL,
	tiers TEXT NOT NULL,
	capacity INTEGER NOT NULL,
	idle_mw BIGINT NOT NULL,
	addr TEXT NOT NULL,
	sig BYTEA NOT NULL,
	joined TIMESTAMPTZ NOT NULL DEFAULT now(),
	seen TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS cluster_jobs (
	id BIGSERIAL PRIMARY KEY,
	kind TEXT NOT NULL,
	payload BYTEA NOT NULL,
	by_host TEXT NOT NULL,
	sig BYTEA NOT NULL,
	state TEXT NOT NULL DEFAULT 'queued',
	fence BIGINT NOT NULL DEFAULT 0,
	holder TEXT,
	lease_until TIMESTAMPTZ,
	attempts INTEGER NOT NULL DEFAULT 0,
	result BYTEA,
	reason TEXT,
	queued TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS cluster_sandboxes (
	id TEXT PRIMARY KEY,
	host TEXT NOT NULL,
	state TEXT NOT NULL,
	head BYTEA NOT NULL,
	bundle BYTEA NOT NULL,
	fence BIGINT NOT NULL,
	updated TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS cluster_pools (
	host TEXT NOT NULL,
	name TEXT NOT NULL,
	ready INTEGER NOT NULL,
	sig BYTEA NOT NULL,
	updated TIMESTAMPTZ NOT NULL DEFAULT now(),
	PRIMARY KEY (host, name)
);
CREATE TABLE IF NOT EXISTS cluster_chains (
	name TEXT PRIMARY KEY,
	size BIGINT NOT NULL,
	head BYTEA NOT NULL,
	fence BIGINT NOT NULL DEFAULT 0,
	writer TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS cluster_chain_entries (
	name TEXT NOT NULL,
	seq BIGINT NOT NULL,
	line BYTEA NOT NULL,
	by_host TEXT NOT NULL,
	sig BYTEA NOT NULL,
	PRIMARY KEY (name, seq)
);
CREATE TABLE IF NOT EXISTS cluster_blobgc (
	one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
	epoch BIGINT NOT NULL DEFAULT 0,
	until TIMESTAMPTZ,
	by_host TEXT NOT NULL DEFAULT ''
);
INSERT INTO cluster_blobgc (one) VALUES (true) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS cluster_pool_sends (
	host TEXT NOT NULL,
	name TEXT NOT NULL,
	said BIGINT NOT NULL,
	sent INTEGER NOT NULL,
	PRIMARY KEY (host, name)
);
`

// schemaSQL makes the tables, the queue's index, and the columns later
// versions added (pgstore.AddIndex, AddColumn: no lock taken on a table
// that has them already).
var schemaSQL = tablesSQL +
	pgstore.AddIndex("cluster_jobs_ready", "ON cluster_jobs (kind, id) WHERE state IN ('queued', 'leased')") +
	pgstore.AddColumn("cluster_sandboxes", "tier", "TEXT NOT NULL DEFAULT ''") +
	pgstore.AddColumn("cluster_sandboxes", "owner", "TEXT NOT NULL DEFAULT ''") +
	pgstore.AddColumn("cluster_sandboxes", "created", "TIMESTAMPTZ NOT NULL DEFAULT now()") +
	pgstore.AddColumn("cluster_sandboxes", "objects", "BYTEA NOT NULL DEFAULT ''") +
	pgstore.AddColumn("cluster_sandboxes", "by_host", "TEXT NOT NULL DEFAULT ''") +
	pgstore.AddColumn("cluster_sandboxes", "sig", "BYTEA NOT NULL DEFAULT ''") +
	pgstore.AddColumn("cluster_pools", "said", "BIGINT NOT NULL DEFAULT 0") +
	pgstore.AddColumn("cluster_jobs", "taken", "BOOLEAN NOT NULL DEFAULT false") +
	pgstore.AddColumn("cluster_jobs", "ended", "TIMESTAMPTZ") +
	pgstore.AddColumn("cluster_jobs", "result_sig", "BYTEA NOT NULL DEFAULT ''")

// Errors a member meets.
var (
	// ErrStaleFence: the job was claimed again since this lease was
	// given (its holder stalled past the lease), or it ended.
	ErrStaleFence = errors.New("a stale fencing token: the job was claimed again since, or has ended")
	// ErrNoJob: nothing to claim.
	ErrNoJob = errors.New("no job to claim")
	// ErrImpostor: a host row under this id holds another key.
	ErrImpostor = errors.New("a host of this id is registered under another key")
	// ErrForged: a row's signature does not verify.
	ErrForged = errors.New("a row's signature does not verify")
)

// Cluster is one cluster's database.
type Cluster struct {
	pool *pgxpool.Pool
	// Log receives what was refused; default slog's.
	Log *slog.Logger
	// DeadAfter is how long a host may go without a heartbeat before
	// the sandboxes it holds live may be taken by another; default
	// DefaultDeadAfter.
	DeadAfter time.Duration
}

// Open connects to the cluster's database (a postgres:// URL or a
// key=value string) and makes the schema where it is missing; a database
// holding another schema version is refused.
func Open(ctx context.Context, dsn string) (*Cluster, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("cluster: the connection string: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{pool: pool}
	if err := c.init(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

func (c *Cluster) init(ctx context.Context) error {
	return pgstore.MakeSchema(ctx, c.pool, 7070707071, "cluster_meta", schemaSQL, Schema)
}

// Close closes the connections.
func (c *Cluster) Close() { c.pool.Close() }

func (c *Cluster) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// Host is what a host says of itself when it joins.
type Host struct {
	Key      key.Public
	Tiers    []tier.Tier // the tiers its probes earned
	Capacity int         // sandboxes it takes at once
	IdleMW   int64       // its idle power, from its meter, in milliwatts
	Addr     string      // where its API answers
}

// ID is the host's id: its key's.
func (h Host) ID() string { return h.Key.ID().String() }

func (h Host) message() []byte {
	var ts []string
	for _, t := range h.Tiers {
		ts = append(ts, t.String())
	}
	return fields("sandbox.cluster.host/1", h.ID(), h.Key.String(), strings.Join(ts, ","), strconv.Itoa(h.Capacity), strconv.FormatInt(h.IdleMW, 10), h.Addr)
}

// signedBy says whether sig signs msg under pub, the key the cluster's
// row of host id holds (nil where it has no such row), and that key is
// id's.
func signedBy(id string, pub, msg, sig []byte) bool {
	var k key.Public
	if len(pub) != len(k) {
		return false
	}
	copy(k[:], pub)
	return k.ID().String() == id && k.Verify(msg, sig)
}

// fields is a signed message: a domain, then each field, each preceded
// by its length, so no two lists of fields make the same bytes.
func fields(domain string, fs ...string) []byte {
	var b bytes.Buffer
	for _, f := range append([]string{domain}, fs...) {
		b.WriteString(strconv.Itoa(len(f)))
		b.WriteByte(':')
		b.WriteString(f)
	}
	return b.Bytes()
}

// Member is a host that joined, acting with its key.
type Member struct {
	c    *Cluster
	key  key.Private
	Host Host
}

// Join registers h (its row signed by k, whose public half h must name)
// or updates its row; a row of the same id under another key is refused
// (ErrImpostor).
func (c *Cluster) Join(ctx context.Context, k key.Private, h Host) (*Member, error) {
	if h.Key != k.Public() {
		return nil, fmt.Errorf("cluster: join: the host names key %s but signs with %s", h.Key, k.Public())
	}
	if h.Capacity < 0 || h.IdleMW < 0 {
		return nil, fmt.Errorf("cluster: join: capacity %d and idle power %d mW must not be negative", h.Capacity, h.IdleMW)
	}
	var ts []string
	for _, t := range h.Tiers {
		ts = append(ts, t.String())
	}
	sig := k.Sign(h.message())
	tag, err := c.pool.Exec(ctx, `INSERT INTO cluster_hosts (id, pub, tiers, capacity, idle_mw, addr, sig) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET tiers = $3, capacity = $4, idle_mw = $5, addr = $6, sig = $7, seen = now()
WHERE cluster_hosts.pub = $2`, h.ID(), h.Key[:], strings.Join(ts, ","), h.Capacity, h.IdleMW, h.Addr, sig)
	if err != nil {
		return nil, fmt.Errorf("cluster: join: %w", err)
	}
	if tag.RowsAffected() == 0 {
		c.log().Warn("cluster: a host presented an id registered under another key", "id", h.ID(), "key", h.Key.String())
		return nil, fmt.Errorf("cluster: join %s: %w", h.ID(), ErrImpostor)
	}
	return &Member{c: c, key: k, Host: h}, nil
}

// Heartbeat says the member is alive (the database's clock).
func (m *Member) Heartbeat(ctx context.Context) error {
	tag, err := m.c.pool.Exec(ctx, `UPDATE cluster_hosts SET seen = now() WHERE id = $1 AND pub = $2`, m.Host.ID(), m.Host.Key[:])
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("its row is gone or holds another key: %w", ErrImpostor)
	}
	if err != nil {
		return fmt.Errorf("cluster: heartbeat of %s: %w", m.Host.ID(), err)
	}
	return nil
}

// Seen is a host as the cluster knows it, its row verified.
type Seen struct {
	Host
	Joined, Seen time.Time
	Age          time.Duration // since its last heartbeat, by the database's clock
}

// Hosts lists the hosts whose rows verify, by id; a row that does not
// verify is logged and left out.
func (c *Cluster) Hosts(ctx context.Context) ([]Seen, error) {
	return retried(ctx, c, "hosts", func() ([]Seen, error) { return c.hosts(ctx) })
}

func (c *Cluster) hosts(ctx context.Context) ([]Seen, error) {
	rows, err := c.pool.Query(ctx, `SELECT id, pub, tiers, capacity, idle_mw, addr, sig, joined, seen, extract(epoch FROM now() - seen) FROM cluster_hosts ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("cluster: hosts: %w", err)
	}
	defer rows.Close()
	var out []Seen
	for rows.Next() {
		var (
			id, tiers, a string
			pub, sig     []byte
			s            Seen
			age          float64
		)
		if err := rows.Scan(&id, &pub, &tiers, &s.Capacity, &s.IdleMW, &a, &sig, &s.Joined, &s.Seen, &age); err != nil {
			return nil, fmt.Errorf("cluster: hosts: %w", err)
		}
		s.Addr, s.Age = a, time.Duration(age*float64(time.Second))
		if err := s.Host.fill(id, pub, tiers, sig); err != nil {
			c.log().Warn("cluster: a host row refused", "id", id, "err", err)
			continue
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// fill checks a host row read back and makes h of it.
func (h *Host) fill(id string, pub []byte, tiers string, sig []byte) error {
	if len(pub) != len(h.Key) {
		return fmt.Errorf("%w: its key is %d bytes", ErrForged, len(pub))
	}
	copy(h.Key[:], pub)
	if h.ID() != id {
		return fmt.Errorf("%w: id %s is not its key's (%s)", ErrForged, id, h.ID())
	}
	h.Tiers = nil
	if tiers != "" {
		for _, s := range strings.Split(tiers, ",") {
			t, err := tier.Parse(s)
			if err != nil {
				return fmt.Errorf("%w: tier %q", ErrForged, s)
			}
			h.Tiers = append(h.Tiers, t)
		}
	}
	if !h.Key.Verify(h.message(), sig) {
		return ErrForged
	}
	return nil
}
