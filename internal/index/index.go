package index

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// Schema is the index's schema version, kept in its meta table: an index
// of another version is rebuilt, never read.
const Schema = "sandbox.index/1"

const schemaSQL = `
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
	id TEXT PRIMARY KEY,
	started INTEGER NOT NULL,
	tier TEXT NOT NULL,
	status TEXT NOT NULL,
	exit INTEGER,
	entry TEXT NOT NULL,
	damaged TEXT NOT NULL,
	pending INTEGER NOT NULL,
	indexed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_newest ON runs (started DESC, id);
CREATE TABLE IF NOT EXISTS records (
	id TEXT PRIMARY KEY,
	phase TEXT NOT NULL,
	head TEXT NOT NULL,
	segments INTEGER NOT NULL,
	executed INTEGER NOT NULL,
	updated INTEGER NOT NULL,
	indexed INTEGER NOT NULL
);
`

// DB is an open index. It implements store.Index.
type DB struct {
	db   *sql.DB
	path string
}

var _ store.Index = (*DB)(nil)

// Open opens (making it) the index at path. An index of another schema,
// or one SQLite cannot read, is an error naming it: the caller rebuilds.
func Open(path string) (*DB, error) {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	d := &DB{db: db, path: path}
	if err := d.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return d, nil
}

func (d *DB) init() error {
	if _, err := d.db.Exec(schemaSQL); err != nil {
		return err
	}
	var v string
	err := d.db.QueryRow(`SELECT v FROM meta WHERE k = 'schema'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = d.db.Exec(`INSERT OR IGNORE INTO meta (k, v) VALUES ('schema', ?)`, Schema)
		return err
	case err != nil:
		return err
	case v != Schema:
		return fmt.Errorf("its schema is %q, not %s", v, Schema)
	}
	return nil
}

// Close closes it.
func (d *DB) Close() error { return d.db.Close() }

// Path is where it is.
func (d *DB) Path() string { return d.path }

// PutRun adds or replaces a run's row.
func (d *DB) PutRun(r store.IndexedRun) error {
	var exit any
	if r.Exit != nil {
		exit = int64(*r.Exit)
	}
	_, err := d.db.Exec(`INSERT OR REPLACE INTO runs (id, started, tier, status, exit, entry, damaged, pending, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID.Hex(), r.Started.UnixNano(), tierText(r), string(r.Status), exit, r.Entry, r.Damaged, boolInt(r.Pending), time.Now().UnixNano())
	return err
}

// CommitRun makes a pending row final.
func (d *DB) CommitRun(id addr.Addr) error {
	_, err := d.db.Exec(`UPDATE runs SET pending = 0 WHERE id = ?`, id.Hex())
	return err
}

// DropRun removes a run's row.
func (d *DB) DropRun(id addr.Addr) error {
	_, err := d.db.Exec(`DELETE FROM runs WHERE id = ?`, id.Hex())
	return err
}

// Runs lists rows newest first (then by id): at most q.Limit (0: all),
// those whose id starts with q.Prefix (hex) when it is set.
func (d *DB) Runs(q store.RunQuery) ([]store.IndexedRun, error) {
	var where []string
	var args []any
	if q.Prefix != "" {
		if strings.Trim(q.Prefix, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("index: %q is not lower-case hex", q.Prefix)
		}
		where = append(where, "id >= ? AND id < ?")
		args = append(args, q.Prefix, q.Prefix+"g")
	}
	s := `SELECT id, started, tier, status, exit, entry, damaged, pending FROM runs`
	if len(where) > 0 {
		s += " WHERE " + strings.Join(where, " AND ")
	}
	s += " ORDER BY started DESC, id"
	if q.Limit > 0 {
		s += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := d.db.Query(s, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.IndexedRun
	for rows.Next() {
		var (
			id, t, status, entry, damaged string
			started                       int64
			exit                          sql.NullInt64
			pending                       int
		)
		if err := rows.Scan(&id, &started, &t, &status, &exit, &entry, &damaged, &pending); err != nil {
			return nil, err
		}
		r := store.IndexedRun{Started: time.Unix(0, started).UTC(), Status: attest.Status(status), Entry: entry, Damaged: damaged, Pending: pending != 0}
		if r.ID, err = addr.Parse(addr.Prefix + id); err != nil {
			return nil, fmt.Errorf("index: run row %q: %w", id, err)
		}
		if t != "" {
			if r.Tier, err = tier.Parse(t); err != nil {
				return nil, fmt.Errorf("index: run %s: tier %q: %w", id, t, err)
			}
		}
		if exit.Valid {
			e := int(exit.Int64)
			r.Exit = &e
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PutRecord adds or replaces a record's row.
func (d *DB) PutRecord(r store.IndexedRecord) error {
	_, err := d.db.Exec(`INSERT OR REPLACE INTO records (id, phase, head, segments, executed, updated, indexed) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Phase, r.Head.String(), r.Segments, r.Executed, r.Updated.UnixNano(), time.Now().UnixNano())
	return err
}

// RecordsComplete says whether every record has a row.
func (d *DB) RecordsComplete() (bool, error) { return d.flag("records_complete") }

// RebuildRecords replaces the record rows written before since with
// recs, and says the records are complete (as Rebuild does for runs).
func (d *DB) RebuildRecords(recs []store.IndexedRecord, since time.Time) error {
	tx, err := d.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM records WHERE indexed < ?`, since.UnixNano()); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	for _, r := range recs {
		if _, err := tx.Exec(`INSERT OR REPLACE INTO records (id, phase, head, segments, executed, updated, indexed) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Phase, r.Head.String(), r.Segments, r.Executed, r.Updated.UnixNano(), now); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(`INSERT OR REPLACE INTO meta (k, v) VALUES ('records_complete', '1')`); err != nil {
		return err
	}
	return tx.Commit()
}

// Records lists record rows by id.
func (d *DB) Records() ([]store.IndexedRecord, error) {
	rows, err := d.db.Query(`SELECT id, phase, head, segments, executed, updated FROM records ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.IndexedRecord
	for rows.Next() {
		var r store.IndexedRecord
		var head string
		var updated int64
		if err := rows.Scan(&r.ID, &r.Phase, &head, &r.Segments, &r.Executed, &updated); err != nil {
			return nil, err
		}
		if r.Head, err = addr.Parse(head); err != nil {
			return nil, fmt.Errorf("index: record %s: head: %w", r.ID, err)
		}
		r.Updated = time.Unix(0, updated).UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// Complete says whether every committed run is in it (it was built by a
// scan, and kept since).
func (d *DB) Complete() (bool, error) { return d.flag("complete") }

func (d *DB) flag(k string) (bool, error) {
	var v string
	err := d.db.QueryRow(`SELECT v FROM meta WHERE k = ?`, k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return v == "1", err
}

// Rebuild replaces the run rows written before since (when the scan
// that found runs began) with runs, and says the index is complete: one
// transaction, so a reader sees the old index or the new one, and a run
// indexed by another process during the scan keeps its row.
func (d *DB) Rebuild(runs []store.IndexedRun, since time.Time) error {
	tx, err := d.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`DELETE FROM runs WHERE indexed < ?`, since.UnixNano()); err != nil {
		return err
	}
	st, err := tx.Prepare(`INSERT OR REPLACE INTO runs (id, started, tier, status, exit, entry, damaged, pending, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now().UnixNano()
	for _, r := range runs {
		var exit any
		if r.Exit != nil {
			exit = int64(*r.Exit)
		}
		if _, err := st.Exec(r.ID.Hex(), r.Started.UnixNano(), tierText(r), string(r.Status), exit, r.Entry, r.Damaged, now); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(`INSERT OR REPLACE INTO meta (k, v) VALUES ('complete', '1')`); err != nil {
		return err
	}
	return tx.Commit()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tierText is a row's tier: none for a run whose attestation could not
// be read.
func tierText(r store.IndexedRun) string {
	if r.Status == "" {
		return ""
	}
	return r.Tier.String()
}
