package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cluster"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/tier"
)

// TestGCRefusesAStateDirectory: a host's state directory named as a
// cluster's file:// blob store is refused before anything is collected
// (its blobs are its own records' too); a shared directory is not.
func TestGCRefusesAStateDirectory(t *testing.T) {
	shared := t.TempDir()
	if _, err := store.Open(shared); err != nil {
		t.Fatal(err)
	}
	if err := notAStateDir("file://" + shared); err != nil {
		t.Fatalf("a shared blob directory: %v", err)
	}
	for _, n := range []string{"host.key", "runs", "index.db"} {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := notAStateDir("file://" + d); err == nil || !strings.Contains(err.Error(), n) {
			t.Errorf("a directory holding %s: %v", n, err)
		}
	}
	if err := notAStateDir("s3://bucket?endpoint=http://127.0.0.1:1"); err != nil {
		t.Fatalf("an S3 store: %v", err)
	}
}

// plantedLists is a cluster's blob store where someone who can write it
// put other bytes under each object list's address before a host did:
// a put keeps what the store holds.
type plantedLists struct{ *store.Store }

func (p plantedLists) PutBlob(a addr.Addr, b []byte) error {
	if bytes.HasPrefix(b, []byte("sandbox-objects/")) {
		return os.WriteFile(p.Path("blobs", a.Hex()), []byte("planted"), 0o644)
	}
	return p.Store.PutBlob(a, b)
}

// bundleReads counts the bundles a collection reads (cluster.Namer).
type bundleReads struct{ n int }

func (r *bundleReads) Bundle(ctx context.Context, a addr.Addr) ([]addr.Addr, error) {
	r.n++
	return []addr.Addr{a}, nil
}

func (r *bundleReads) Result(string, []byte) ([]addr.Addr, error) { return nil, nil }

// TestPublishNamesNoPlantedList: a suspension whose object list the
// blob store holds but not whole (read back after the put) is named
// without a list, and a collection reads its bundle; a whole list is
// named, and the bundle is not read.
func TestPublishNamesNoPlantedList(t *testing.T) {
	c, m, _, logs := oneHost(t)
	ctx := context.Background()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chunk := addr.Of([]byte("chunk"))
	if err := st.PutBlob(chunk, []byte("chunk")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		blobs  store.Blobs
		bundle string
		reads  int
	}{
		{"a whole list", st, "bundle 1", 0},
		{"a planted list", plantedLists{st}, "bundle 2", 1},
	} {
		s := &clusterShared{c: c, m: m, blobs: tc.blobs}
		epoch, err := s.HoldBlobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PublishHeld(ctx, epoch, "sb-000000000001", "", addr.Of([]byte("head")), []byte(tc.bundle), []addr.Addr{chunk}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := &bundleReads{}
		col, err := c.CollectBlobs(ctx, st, r, "test", false)
		if err != nil || r.n != tc.reads || !st.HasBlob(chunk) && tc.reads == 0 {
			t.Fatalf("%s: collected %+v, %v, %d bundles read, want %d", tc.name, col, err, r.n, tc.reads)
		}
	}
	if !strings.Contains(logs.String(), "holds a suspension's object list but not whole") {
		t.Fatalf("the planted list not logged: %s", logs.String())
	}
}

// TestFleetItemRunsWhatWasQueued: a fleet item's job whose payload (and
// its queuer's signature) was replaced, in the database, by another
// job's before a host ran it: the host runs the other payload and signs
// its result honestly, and the fleet's host refuses that result, logged,
// because it is not what it queued.
func TestFleetItemRunsWhatWasQueued(t *testing.T) {
	c, m, dsn, logs := oneHost(t)
	ctx := context.Background()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterShared{c: c, m: m, blobs: st}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	type ran struct {
		err error
	}
	done := make(chan ran, 1)
	go func() {
		_, _, _, err := s.RunItem(ctx, []byte("item x"))
		done <- ran{err}
	}()
	var x int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		err := conn.QueryRow(ctx, `SELECT id FROM cluster_jobs WHERE payload = 'item x'`).Scan(&x)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) || time.Now().After(deadline) {
			t.Fatalf("the item's job was not queued within a minute: %v", err)
		}
	}
	y, err := m.Enqueue(ctx, cluster.Job{Kind: fleetItemKind, Payload: []byte("item y")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE cluster_jobs SET payload = j.payload, sig = j.sig FROM cluster_jobs j WHERE cluster_jobs.id = $1 AND j.id = $2`, x, y); err != nil {
		t.Fatal(err)
	}
	l, err := m.Claim(ctx, time.Minute, fleetItemKind)
	if err != nil || l.ID != x || string(l.Job.Payload) != "item y" {
		t.Fatalf("the claim: %+v %v", l, err)
	}
	if err := m.Complete(ctx, l, []byte(`{"type":"`+live.ItemResultType+`"}`)); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !errors.Is(r.err, cluster.ErrEdited) || !strings.Contains(r.err.Error(), "another payload") {
		t.Fatalf("the fleet's host took the result of another payload: %v", r.err)
	}
	if !strings.Contains(logs.String(), "ran another payload") {
		t.Fatalf("not logged: %s", logs.String())
	}
}

// oneHost is a cluster on a PostgreSQL of the test's own, one host
// joined to it, its database's DSN, and what the cluster logs.
func oneHost(t *testing.T) (*cluster.Cluster, *cluster.Member, string, *bytes.Buffer) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("pgtest runs PostgreSQL as its own user: needs root here")
	}
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	ctx := context.Background()
	dsn := pg.NewDatabase(t)
	c, err := cluster.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	logs := &bytes.Buffer{}
	c.Log = slog.New(slog.NewTextHandler(logs, nil))
	k, err := key.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, k, cluster.Host{Key: k.Public(), Tiers: []tier.Tier{tier.S1}, Capacity: 1, Addr: "a:7070"})
	if err != nil {
		t.Fatal(err)
	}
	return c, m, dsn, logs
}
