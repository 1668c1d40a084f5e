package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// Schema names the tables this package makes.
const Schema = "sandbox.pgstore/1"

// MaxBlob is the largest blob this store keeps (PostgreSQL's bytea
// bound is 1 GB; a row that size is a poor use of a database).
const MaxBlob = 256 << 20

const tablesSQL = `
CREATE TABLE IF NOT EXISTS sandbox_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sandbox_blobs (addr BYTEA PRIMARY KEY, data BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS sandbox_runs (
	id BYTEA PRIMARY KEY,
	started BIGINT NOT NULL,
	tier SMALLINT NOT NULL,
	status TEXT NOT NULL,
	exit INTEGER,
	entry TEXT NOT NULL,
	damaged TEXT NOT NULL,
	pending BOOLEAN NOT NULL,
	indexed BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS sandbox_records (
	id TEXT PRIMARY KEY,
	phase TEXT NOT NULL,
	head TEXT NOT NULL,
	segments INTEGER NOT NULL,
	executed INTEGER NOT NULL,
	updated BIGINT NOT NULL,
	indexed BIGINT NOT NULL
);
`

// schemaSQL makes the tables and their index (AddIndex).
var schemaSQL = tablesSQL + AddIndex("sandbox_runs_order", "ON sandbox_runs (started DESC, id)")

// Store is one PostgreSQL database's blobs and index.
type Store struct {
	pool *pgxpool.Pool
	// Timeout bounds each call (PostgreSQL restarting, a cut network):
	// default 30 s.
	Timeout time.Duration
	// beforeCommit, in tests, runs inside a put's transaction just
	// before it commits.
	beforeCommit func()
}

var (
	_ store.Blobs = (*Store)(nil)
	_ store.Index = (*Store)(nil)
)

// Open connects to the database dsn names (a postgres:// URL or a
// key=value string) and makes the schema where it is missing. A database
// that holds another schema version is refused.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: the connection string: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.init(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: %s: %w", cfg.ConnConfig.Database, err)
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	return MakeSchema(ctx, s.pool, 7070707070, "sandbox_meta", schemaSQL, Schema)
}

// MakeSchema makes a schema where it is missing, under an advisory lock
// (hosts opening one database at once), and names it in meta (a table
// of k, v the schema makes); a database whose meta names another schema
// is refused, never altered. The schema's statements take locks on
// tables other hosts use meanwhile: a transaction PostgreSQL ended to
// break a deadlock with theirs is tried again (five times in all).
func MakeSchema(ctx context.Context, pool *pgxpool.Pool, lock int64, meta, schemaSQL, schema string) error {
	var err error
	for try := 1; try <= 5; try++ {
		err = makeSchema(ctx, pool, lock, meta, schemaSQL, schema)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
	}
	return err
}

// AddColumn is a statement that adds column col (of definition def) to
// table where it has none, taking no lock on a table that has it:
// ALTER TABLE takes an exclusive one even to find there is nothing to
// add, which hosts of a cluster starting while others run would queue
// behind, and deadlock with. table and col are lower-case SQL names
// (constants of the caller's: anything else panics).
func AddColumn(table, col, def string) string {
	mustName(table, col)
	return `DO $add_column$ BEGIN
IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = '` + table + `'::regclass AND attname = '` + col + `' AND NOT attisdropped) THEN
ALTER TABLE ` + table + ` ADD COLUMN ` + col + ` ` + def + `;
END IF;
END $add_column$;
`
}

// AddIndex is a statement that makes index name (CREATE INDEX name
// ...on, e.g. "ON t (a, b)") where there is none of that name, taking no
// lock on its table where there is: CREATE INDEX IF NOT EXISTS takes a
// share lock on the table before it looks, which waits for every writer.
func AddIndex(name, on string) string {
	mustName(name)
	return `DO $add_index$ BEGIN
IF pg_catalog.to_regclass('` + name + `') IS NULL THEN
CREATE INDEX ` + name + ` ` + on + `;
END IF;
END $add_index$;
`
}

// sqlName is a lower-case SQL name that needs no quoting.
var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func mustName(names ...string) {
	for _, n := range names {
		if !sqlName.MatchString(n) {
			panic("pgstore: " + strconv.Quote(n) + " is not a lower-case SQL name")
		}
	}
}

func makeSchema(ctx context.Context, pool *pgxpool.Pool, lock int64, meta, schemaSQL, schema string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lock); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("making the schema: %w", err)
	}
	var v string
	err = tx.QueryRow(ctx, `SELECT v FROM `+meta+` WHERE k = 'schema'`).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := tx.Exec(ctx, `INSERT INTO `+meta+` (k, v) VALUES ('schema', $1)`, schema); err != nil {
			return err
		}
	case err != nil:
		return err
	case v != schema:
		return fmt.Errorf("it holds schema %q, not %s: refused, never altered", v, schema)
	}
	return tx.Commit(ctx)
}

// Close closes the connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

func (s *Store) ctx() (context.Context, context.CancelFunc) { return s.ctxFrom(context.Background()) }

// ctxFrom is parent bounded by the store's Timeout.
func (s *Store) ctxFrom(parent context.Context) (context.Context, context.CancelFunc) {
	d := s.Timeout
	if d <= 0 {
		d = 30 * time.Second
	}
	return context.WithTimeout(parent, d)
}

// PutBlob stores b under a, once; bytes that are not a's are refused
// before anything is written.
func (s *Store) PutBlob(a addr.Addr, b []byte) error {
	if len(b) > MaxBlob {
		return fmt.Errorf("pgstore: blob %s: %d bytes, over the %d this store keeps", a, len(b), MaxBlob)
	}
	if got := addr.Of(b); got != a {
		return fmt.Errorf("pgstore: blob %s: the bytes given are %s's, not its", a, got)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: blob %s: %w", a, err)
	}
	defer tx.Rollback(ctx)
	if b == nil {
		b = []byte{}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO sandbox_blobs (addr, data) VALUES ($1, $2) ON CONFLICT (addr) DO NOTHING`, a[:], b); err != nil {
		return fmt.Errorf("pgstore: blob %s: %w", a, err)
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: blob %s: %w", a, err)
	}
	return nil
}

// Blob returns a's bytes, checked against a; an absent blob is an error
// wrapping fs.ErrNotExist.
func (s *Store) Blob(a addr.Addr) ([]byte, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var b []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM sandbox_blobs WHERE addr = $1`, a[:]).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: blob %s: %w", a, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: blob %s: %w", a, err)
	}
	if got := addr.Of(b); got != a {
		return nil, fmt.Errorf("pgstore: blob %s: %w: its row holds %s's bytes (%d): refused", a, ErrTampered, got, len(b))
	}
	return b, nil
}

// ErrTampered is wrapped by the refusal of a blob whose stored bytes do
// not hash to its name.
var ErrTampered = fmt.Errorf("a stored blob does not hash to its name: %w", store.ErrCorrupt)

// HasBlob says a blob is stored under a (its bytes are checked when read).
func (s *Store) HasBlob(a addr.Addr) bool {
	ctx, cancel := s.ctx()
	defer cancel()
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1 FROM sandbox_blobs WHERE addr = $1`, a[:]).Scan(&one) == nil
}

const putRunSQL = `INSERT INTO sandbox_runs (id, started, tier, status, exit, entry, damaged, pending, indexed)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (id) DO UPDATE SET started = $2, tier = $3, status = $4, exit = $5, entry = $6, damaged = $7, pending = $8, indexed = $9`

func runArgs(r store.IndexedRun, now int64) []any {
	var exit *int32
	if r.Exit != nil {
		e := int32(*r.Exit)
		exit = &e
	}
	return []any{r.ID[:], r.Started.UnixNano(), int16(r.Tier), string(r.Status), exit, r.Entry, r.Damaged, r.Pending, now}
}

// PutRun adds or replaces a run's row.
func (s *Store) PutRun(r store.IndexedRun) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, putRunSQL, runArgs(r, time.Now().UnixNano())...)
	return wrap("run "+r.ID.String(), err)
}

// CommitRun makes a pending row final (nothing where there is no row).
func (s *Store) CommitRun(id addr.Addr) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, `UPDATE sandbox_runs SET pending = FALSE WHERE id = $1`, id[:])
	return wrap("run "+id.String(), err)
}

// DropRun removes a run's row.
func (s *Store) DropRun(id addr.Addr) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, `DELETE FROM sandbox_runs WHERE id = $1`, id[:])
	return wrap("run "+id.String(), err)
}

// Runs lists rows newest first, then by id.
func (s *Store) Runs(q store.RunQuery) ([]store.IndexedRun, error) {
	var out []store.IndexedRun
	err := s.EachRun(q, func(r store.IndexedRun) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// EachRun gives rows to f newest first, then by id, as it reads them.
func (s *Store) EachRun(q store.RunQuery, f func(store.IndexedRun) error) error {
	sql := `SELECT id, started, tier, status, exit, entry, damaged, pending FROM sandbox_runs`
	var args []any
	if q.Prefix != "" {
		lo, hi, err := prefixRange(q.Prefix)
		if err != nil {
			return err
		}
		sql += ` WHERE id >= $1`
		args = append(args, lo)
		if hi != nil {
			sql += ` AND id < $2`
			args = append(args, hi)
		}
	}
	sql += ` ORDER BY started DESC, id`
	if q.Limit > 0 {
		sql += fmt.Sprintf(` LIMIT %d`, q.Limit)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return wrap("runs", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id            []byte
			started       int64
			t             int16
			status, entry string
			exit          *int32
			damaged       string
			pending       bool
		)
		if err := rows.Scan(&id, &started, &t, &status, &exit, &entry, &damaged, &pending); err != nil {
			return wrap("runs", err)
		}
		r, err := runRow(id, started, t, status, exit, entry, damaged, pending)
		if err != nil {
			return err
		}
		if err := f(r); err != nil {
			return err
		}
	}
	return wrap("runs", rows.Err())
}

// runRow checks and makes a row read back: a row edited by hand into
// something no run has (an id of another length, an unknown tier) is
// refused, naming it.
func runRow(id []byte, started int64, t int16, status string, exit *int32, entry, damaged string, pending bool) (store.IndexedRun, error) {
	var r store.IndexedRun
	if len(id) != len(r.ID) {
		return r, fmt.Errorf("pgstore: a run row's id is %d bytes, not %d: refused", len(id), len(r.ID))
	}
	copy(r.ID[:], id)
	if t < 0 || int(t) >= len(tier.All) {
		return r, fmt.Errorf("pgstore: run %s: tier %d: refused", r.ID, t)
	}
	r.Started = time.Unix(0, started).UTC()
	r.Tier = tier.Tier(t)
	r.Status = attest.Status(status)
	if exit != nil {
		e := int(*exit)
		r.Exit = &e
	}
	r.Entry, r.Damaged, r.Pending = entry, damaged, pending
	return r, nil
}

const putRecordSQL = `INSERT INTO sandbox_records (id, phase, head, segments, executed, updated, indexed)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO UPDATE SET phase = $2, head = $3, segments = $4, executed = $5, updated = $6, indexed = $7`

func recordArgs(r store.IndexedRecord, now int64) []any {
	return []any{r.ID, r.Phase, r.Head.String(), r.Segments, r.Executed, r.Updated.UnixNano(), now}
}

// PutRecord adds or replaces a record's row.
func (s *Store) PutRecord(r store.IndexedRecord) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.pool.Exec(ctx, putRecordSQL, recordArgs(r, time.Now().UnixNano())...)
	return wrap("record "+r.ID, err)
}

// Records lists record rows by id.
func (s *Store) Records() ([]store.IndexedRecord, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT id, phase, head, segments, executed, updated FROM sandbox_records ORDER BY id`)
	if err != nil {
		return nil, wrap("records", err)
	}
	defer rows.Close()
	var out []store.IndexedRecord
	for rows.Next() {
		var (
			r       store.IndexedRecord
			head    string
			updated int64
		)
		if err := rows.Scan(&r.ID, &r.Phase, &head, &r.Segments, &r.Executed, &updated); err != nil {
			return nil, wrap("records", err)
		}
		if r.Head, err = addr.Parse(head); err != nil {
			return nil, fmt.Errorf("pgstore: record %s: head: %w", r.ID, err)
		}
		r.Updated = time.Unix(0, updated).UTC()
		out = append(out, r)
	}
	return out, wrap("records", rows.Err())
}

// Complete says every committed run has a row.
func (s *Store) Complete() (bool, error) { return s.flag("complete") }

// RecordsComplete says every record has a row.
func (s *Store) RecordsComplete() (bool, error) { return s.flag("records_complete") }

func (s *Store) flag(k string) (bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	var v string
	err := s.pool.QueryRow(ctx, `SELECT v FROM sandbox_meta WHERE k = $1`, k).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return v == "1", wrap(k, err)
}

// Rebuild replaces the run rows written before since with runs, at
// once, and marks the index complete.
func (s *Store) Rebuild(runs []store.IndexedRun, since time.Time) error {
	return s.rebuild("sandbox_runs", "complete", since, func(b *pgx.Batch, now int64) {
		for _, r := range runs {
			b.Queue(putRunSQL, runArgs(r, now)...)
		}
	})
}

// RebuildRecords is Rebuild for the record rows.
func (s *Store) RebuildRecords(recs []store.IndexedRecord, since time.Time) error {
	return s.rebuild("sandbox_records", "records_complete", since, func(b *pgx.Batch, now int64) {
		for _, r := range recs {
			b.Queue(putRecordSQL, recordArgs(r, now)...)
		}
	})
}

func (s *Store) rebuild(table, flag string, since time.Time, queue func(*pgx.Batch, int64)) error {
	ctx, cancel := s.ctx()
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("rebuild", err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM `+table+` WHERE indexed < $1`, since.UnixNano())
	queue(b, time.Now().UnixNano())
	b.Queue(`INSERT INTO sandbox_meta (k, v) VALUES ($1, '1') ON CONFLICT (k) DO UPDATE SET v = '1'`, flag)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return wrap("rebuild", err)
	}
	return wrap("rebuild", tx.Commit(ctx))
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pgstore: %s: %w", what, err)
}

// prefixRange is the byte range of ids whose lower-case hex starts with
// prefix: [lo, hi), hi nil for no upper bound. A prefix that is not
// lower-case hex is refused.
func prefixRange(prefix string) (lo, hi []byte, err error) {
	if len(prefix) > 64 {
		return nil, nil, fmt.Errorf("pgstore: id prefix %q: longer than an id", prefix)
	}
	n := make([]byte, 0, 32)
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return nil, nil, fmt.Errorf("pgstore: id prefix %q: not lower-case hex", prefix)
		}
		if i%2 == 0 {
			n = append(n, v<<4)
		} else {
			n[len(n)-1] |= v
		}
	}
	lo = append([]byte{}, n...)
	// hi: the prefix's last digit plus one, carrying.
	hi = append([]byte{}, n...)
	step := byte(1)
	if len(prefix)%2 == 1 {
		step = 0x10
	}
	for i := len(hi) - 1; i >= 0; i-- {
		s := uint16(hi[i]) + uint16(step)
		hi[i] = byte(s)
		if s <= 0xff {
			return lo, hi[:i+1], nil
		}
		step = 1
	}
	return lo, nil, nil
}

var _ store.Collectable = (*Store)(nil)

// EachBlob calls f with the address of every blob stored
// (store.Collectable), read in pages of 1,000 by address, so that no
// statement stays open while f runs (f may remove what it is given).
func (s *Store) EachBlob(ctx context.Context, f func(addr.Addr) error) error {
	after := []byte{}
	for {
		page, last, err := s.blobPage(ctx, after)
		if err != nil {
			return err
		}
		for _, a := range page {
			if err := f(a); err != nil {
				return err
			}
		}
		if last == nil {
			return nil
		}
		after = last
	}
}

// blobPageSize is how many addresses EachBlob reads at once.
const blobPageSize = 1000

// blobPage reads the addresses of up to blobPageSize blobs after after,
// in order, and the last row's key where the page was full (nil: the
// last page).
func (s *Store) blobPage(ctx context.Context, after []byte) (page []addr.Addr, last []byte, err error) {
	ctx, cancel := s.ctxFrom(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT addr FROM sandbox_blobs WHERE addr > $1 ORDER BY addr LIMIT $2`, after, blobPageSize)
	if err != nil {
		return nil, nil, fmt.Errorf("pgstore: listing blobs: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, nil, fmt.Errorf("pgstore: listing blobs: %w", err)
		}
		n, last = n+1, b
		var a addr.Addr
		if len(b) != len(a) {
			continue // not a blob's row (edited by hand): an address is 32 bytes
		}
		copy(a[:], b)
		page = append(page, a)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("pgstore: listing blobs: %w", err)
	}
	if n < blobPageSize {
		last = nil
	}
	return page, last, nil
}

// RemoveBlobContext removes the blob at a within ctx (and the store's
// Timeout) (store.Collectable); one not stored is no error.
func (s *Store) RemoveBlobContext(ctx context.Context, a addr.Addr) error {
	ctx, cancel := s.ctxFrom(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM sandbox_blobs WHERE addr = $1`, a[:]); err != nil {
		return fmt.Errorf("pgstore: remove blob %s: %w", a, err)
	}
	return nil
}
