package index

import (
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
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
const Schema = "sandbox.index/3"

const schemaSQL = `
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
	started INTEGER NOT NULL,
	id BLOB NOT NULL,
	indexed INTEGER NOT NULL,
	line BLOB NOT NULL,
	PRIMARY KEY (started DESC, id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS runs_id ON runs (id);
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
	db *sql.DB
}

var _ store.Index = (*DB)(nil)

// Open opens (making it) the index at path. An index of another schema,
// or one SQLite cannot read, is an error naming it: the caller rebuilds.
func Open(path string) (*DB, error) {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(OFF)", "mmap_size(268435456)", "cache_size(-16384)"} {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	// One connection: SQLite serializes writers anyway, and a pool of
	// them churns descriptors (a closed connection's file stays open
	// while another holds a lock on it). Nothing may use the index
	// while a listing's rows are open (EachRun's callback).
	db.SetMaxOpenConns(1)
	d := &DB{db: db}
	if err := d.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	return d, nil
}

// bootID names this boot of the machine ("" where it cannot be read).
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (d *DB) init() error {
	var v, boot sql.NullString
	if d.db.QueryRow(`SELECT (SELECT v FROM meta WHERE k = 'schema'), (SELECT v FROM meta WHERE k = 'boot')`).Scan(&v, &boot) == nil && v.String == Schema {
		// Made before: a process that lists or adds a run pays one
		// read. Nothing is fsynced (synchronous=OFF), so a machine
		// that went down may have lost rows: after a boot, the next
		// listing rebuilds it.
		if now := bootID(); now != "" && boot.String != now {
			_, err := d.db.Exec(`INSERT OR REPLACE INTO meta (k, v) VALUES ('complete', '0'), ('records_complete', '0'), ('boot', ?)`, now)
			return err
		}
		return nil
	}
	if _, err := d.db.Exec(schemaSQL); err != nil {
		return err
	}
	if now := bootID(); now != "" {
		if _, err := d.db.Exec(`INSERT OR REPLACE INTO meta (k, v) VALUES ('boot', ?)`, now); err != nil {
			return err
		}
	}
	var sv string
	err := d.db.QueryRow(`SELECT v FROM meta WHERE k = 'schema'`).Scan(&sv)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = d.db.Exec(`INSERT OR IGNORE INTO meta (k, v) VALUES ('schema', ?)`, Schema)
		return err
	case err != nil:
		return err
	case sv != Schema:
		return fmt.Errorf("its schema is %q, not %s", sv, Schema)
	}
	return nil
}

// Close closes it.
func (d *DB) Close() error { return d.db.Close() }

// PutRun adds or replaces a run's row.
func (d *DB) PutRun(r store.IndexedRun) error {
	_, err := d.db.Exec(`INSERT OR REPLACE INTO runs (id, started, indexed, line) VALUES (?, ?, ?, ?)`,
		r.ID[:], r.Started.UnixNano(), time.Now().UnixNano(), pack(r))
	return err
}

// CommitRun makes a pending row final (its line's first byte).
func (d *DB) CommitRun(id addr.Addr) error {
	_, err := d.db.Exec(`UPDATE runs SET line = X'00' || substr(line, 2) WHERE id = ? AND substr(line, 1, 1) = X'01'`, id[:])
	return err
}

// DropRun removes a run's row.
func (d *DB) DropRun(id addr.Addr) error {
	_, err := d.db.Exec(`DELETE FROM runs WHERE id = ?`, id[:])
	return err
}

// Runs lists rows newest first (then by id): at most q.Limit (0: all),
// those whose id starts with q.Prefix (hex) when it is set.
func (d *DB) Runs(q store.RunQuery) ([]store.IndexedRun, error) {
	var out []store.IndexedRun
	err := d.EachRun(q, func(r store.IndexedRun) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// EachRun calls f with each row Runs would list, in its order, as it
// reads them; an error from f ends it. f may not use the index.
func (d *DB) EachRun(q store.RunQuery, f func(store.IndexedRun) error) error {
	var args []any
	s := `SELECT line FROM runs`
	if q.Prefix != "" {
		lo, hi, err := prefixRange(q.Prefix)
		if err != nil {
			return err
		}
		s += " WHERE id >= ?"
		args = append(args, lo)
		if hi != nil {
			s += " AND id < ?"
			args = append(args, hi)
		}
	}
	s += " ORDER BY started DESC, id"
	if q.Limit > 0 {
		s += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := d.db.Query(s, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var line sql.RawBytes
		if err := rows.Scan(&line); err != nil {
			return err
		}
		r, err := unpack(line)
		if err != nil {
			return fmt.Errorf("index: a run row: %w", err)
		}
		if err := f(r); err != nil {
			return err
		}
	}
	return rows.Err()
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
	st, err := tx.Prepare(`INSERT OR REPLACE INTO runs (id, started, indexed, line) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now().UnixNano()
	for _, r := range runs {
		r.Pending = false
		if _, err := st.Exec(r.ID[:], r.Started.UnixNano(), now, pack(r)); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(`INSERT OR REPLACE INTO meta (k, v) VALUES ('complete', '1')`); err != nil {
		return err
	}
	return tx.Commit()
}

// A run row's line is what a listing needs, packed, read as one column
// (a column costs as much as the row): byte 0 pending (1) or not (0),
// the id's 32 bytes, the start in Unix nanoseconds (8, big-endian), the
// tier (S0..S7 as 0..7, 0xff for none), the exit code (0xff: none; else
// 0, then 4 bytes, big-endian, two's complement), then the status, the
// entry and the damage, each a 2-byte length and its bytes.
func pack(r store.IndexedRun) []byte {
	b := make([]byte, 0, 64+len(r.Status)+len(r.Entry)+len(r.Damaged))
	if r.Pending {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, r.ID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Started.UnixNano()))
	if r.Status == "" || !r.Tier.Valid() {
		b = append(b, 0xff)
	} else {
		b = append(b, byte(r.Tier))
	}
	if r.Exit == nil {
		b = append(b, 0xff)
	} else {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(*r.Exit)))
	}
	for _, t := range []string{string(r.Status), r.Entry, r.Damaged} {
		if len(t) > 0xffff {
			t = t[:0xffff]
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(t)))
		b = append(b, t...)
	}
	return b
}

var errShort = errors.New("a line cut short")

func unpack(b []byte) (store.IndexedRun, error) {
	var r store.IndexedRun
	if len(b) < 1+32+8+1+1 {
		return r, errShort
	}
	if b[0] > 1 {
		return r, fmt.Errorf("pending byte %d", b[0])
	}
	r.Pending = b[0] == 1
	copy(r.ID[:], b[1:33])
	r.Started = time.Unix(0, int64(binary.BigEndian.Uint64(b[33:41]))).UTC()
	if t := b[41]; t != 0xff {
		r.Tier = tier.Tier(t)
		if !r.Tier.Valid() {
			return r, fmt.Errorf("tier %d", t)
		}
	}
	noTier := b[41] == 0xff
	b = b[42:]
	if b[0] != 0xff && b[0] != 0 {
		return r, fmt.Errorf("exit marker %d", b[0])
	}
	if b[0] == 0 {
		if len(b) < 5 {
			return r, errShort
		}
		e := int(int32(binary.BigEndian.Uint32(b[1:5])))
		r.Exit = &e
		b = b[5:]
	} else {
		b = b[1:]
	}
	var ts [3]string
	for i := range ts {
		if len(b) < 2 {
			return r, errShort
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return r, errShort
		}
		ts[i], b = string(b[2:2+n]), b[2+n:]
	}
	if len(b) != 0 {
		return r, errors.New("bytes after the line")
	}
	if noTier != (ts[0] == "") {
		return r, errors.New("a tier without a status, or a status without a tier")
	}
	r.Status, r.Entry, r.Damaged = status(ts[0]), ts[1], ts[2]
	return r, nil
}

// status is s, one string per status for the statuses there are.
func status(s string) attest.Status {
	for _, k := range []attest.Status{attest.Exited, attest.Killed, attest.Deadline, attest.OutOfFuel, attest.OutOfMem, attest.Trapped, attest.Failed, attest.BudgetExhausted} {
		if string(k) == s {
			return k
		}
	}
	return attest.Status(s)
}

// prefixRange is the range of 32-byte ids whose hex starts with p: lo
// inclusive, hi exclusive (nil: none above).
func prefixRange(p string) (lo, hi []byte, err error) {
	if p == "" || len(p) > 64 || strings.Trim(p, "0123456789abcdef") != "" {
		return nil, nil, fmt.Errorf("index: %q is not a lower-case hex prefix of a run id", p)
	}
	odd := len(p)%2 == 1
	if odd {
		p += "0"
	}
	lo, _ = hex.DecodeString(p)
	hi = append([]byte(nil), lo...)
	step := byte(1)
	if odd {
		step = 0x10
	}
	for i := len(hi) - 1; i >= 0; i-- {
		v := int(hi[i]) + int(step)
		hi[i] = byte(v)
		if v <= 0xff {
			return lo, hi, nil
		}
		step = 1
	}
	return lo, nil, nil // every byte carried: nothing above
}
