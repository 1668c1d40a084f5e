package pgstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
	"github.com/opensubstrate/sandbox/internal/store/storetest"
)

var server *pgtest.Server

// childDSN, in the environment, makes the test binary a writer killed
// mid-put (TestKilledMidPutLeavesNothing).
const childDSN = "PGSTORE_TEST_CHILD_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(childDSN); dsn != "" {
		os.Exit(midPutChild(dsn))
	}
	s, err := pgtest.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgstore: a PostgreSQL for the tests: %v\n", err)
		os.Exit(1)
	}
	server = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBlobsConformance(t *testing.T) {
	storetest.Blobs(t, func(t *testing.T) store.Blobs { return open(t) })
}

func TestCollectableConformance(t *testing.T) {
	storetest.Collectable(t, func(t *testing.T) store.Collectable { return open(t) })
}

func TestIndexConformance(t *testing.T) {
	storetest.Index(t, func(t *testing.T) store.Index { return open(t) })
}

func conn(t *testing.T, s *Store) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), s.pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestTamperedBlobRefused: a row whose bytes were changed behind the
// store's back (by hand, by another writer) is refused when read, naming
// the blob; never returned.
func TestTamperedBlobRefused(t *testing.T) {
	s := open(t)
	data := []byte("the real bytes")
	a := addr.Of(data)
	if err := s.PutBlob(a, data); err != nil {
		t.Fatal(err)
	}
	if _, err := conn(t, s).Exec(context.Background(), `UPDATE sandbox_blobs SET data = 'forged' WHERE addr = $1`, a[:]); err != nil {
		t.Fatal(err)
	}
	got, err := s.Blob(a)
	if !errors.Is(err, ErrTampered) || got != nil || !strings.Contains(err.Error(), a.String()) {
		t.Fatalf("a tampered blob: %q, %v", got, err)
	}
	if err := s.PutBlob(a, []byte("other")); err == nil {
		t.Fatal("a put of bytes that are not the address's was taken")
	}
	big := make([]byte, MaxBlob+1)
	if err := s.PutBlob(addr.Of(big), big); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("a blob over MaxBlob: %v", err)
	}
}

// TestEditedRowRefused: a run row edited by hand into something no run
// has is refused when listed, naming it; a record whose head is not an
// address likewise.
func TestEditedRowRefused(t *testing.T) {
	s := open(t)
	zero := 0
	r := store.IndexedRun{ID: addr.Of([]byte("r")), Started: time.Unix(1_700_000_000, 0).UTC(), Status: attest.Exited, Exit: &zero, Entry: "sh"}
	if err := s.PutRun(r); err != nil {
		t.Fatal(err)
	}
	c := conn(t, s)
	for _, edit := range []string{
		`UPDATE sandbox_runs SET tier = 99`,
		`UPDATE sandbox_runs SET tier = 0, id = '\x0102'`,
	} {
		if _, err := c.Exec(context.Background(), edit); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Runs(store.RunQuery{}); err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: %+v, %v", edit, got, err)
		}
	}
	if err := s.PutRecord(store.IndexedRecord{ID: "rec", Head: addr.Of([]byte("h")), Updated: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(context.Background(), `UPDATE sandbox_records SET head = 'not an address'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Records(); err == nil || !strings.Contains(err.Error(), "record rec") {
		t.Errorf("an edited record head: %v", err)
	}
}

// TestOtherSchemaRefused: a database that holds another schema version
// is refused on Open, and left as it was.
func TestOtherSchemaRefused(t *testing.T) {
	dsn := server.NewDatabase(t)
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn(t, s).Exec(context.Background(), `UPDATE sandbox_meta SET v = 'sandbox.pgstore/0' WHERE k = 'schema'`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(context.Background(), dsn); err == nil || !strings.Contains(err.Error(), "sandbox.pgstore/0") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("another schema: %v", err)
	}
}

// midPutChild puts a blob and, inside its transaction, says so on
// stdout and waits to be killed.
func midPutChild(dsn string) int {
	s, err := Open(context.Background(), dsn)
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	s.beforeCommit = func() {
		fmt.Println("about to commit")
		select {}
	}
	data := bytes.Repeat([]byte("half an upload "), 1<<16)
	s.PutBlob(addr.Of(data), data)
	return 1
}

// TestKilledMidPutLeavesNothing: a writer killed (SIGKILL) after it sent
// a blob and before it committed leaves nothing visible; the same blob
// can be put again at once.
func TestKilledMidPutLeavesNothing(t *testing.T) {
	dsn := server.NewDatabase(t)
	s, err := Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDSN+"="+dsn)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "about to commit\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child said %q", line)
	}
	cmd.Process.Kill()
	cmd.Wait()
	data := bytes.Repeat([]byte("half an upload "), 1<<16)
	a := addr.Of(data)
	if s.HasBlob(a) {
		t.Fatal("a killed writer's blob is visible")
	}
	if _, err := s.Blob(a); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a killed writer's blob: %v", err)
	}
	if err := s.PutBlob(a, data); err != nil {
		t.Fatalf("putting it again: %v", err)
	}
	if got, err := s.Blob(a); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after putting it again: %d bytes, %v", len(got), err)
	}
}

// TestSurvivesARestart: what was put is there after PostgreSQL restarts,
// and the store's connections come back by themselves.
func TestSurvivesARestart(t *testing.T) {
	s := open(t)
	data := []byte("kept across a restart")
	a := addr.Of(data)
	if err := s.PutBlob(a, data); err != nil {
		t.Fatal(err)
	}
	if err := server.Restart(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	var err error
	for range 100 { // the first call may meet a connection the restart cut
		if got, err = s.Blob(a); err == nil {
			break
		}
	}
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after a restart: %q, %v", got, err)
	}
}

// FuzzPrefixRange: every prefix is refused or gives a range holding
// exactly the ids whose hex starts with it.
func FuzzPrefixRange(f *testing.F) {
	for _, p := range []string{"a", "ab", "abc", "f", "ff", "fff", "0", "", "x", "ABC", strings.Repeat("f", 64), strings.Repeat("0", 65)} {
		f.Add(p, []byte("an id"))
	}
	f.Fuzz(func(t *testing.T, p string, seed []byte) {
		lo, hi, err := prefixRange(p)
		if err != nil {
			return
		}
		id := addr.Of(seed)
		h := id.Hex()
		if len(p) <= len(h) {
			// an id that starts with the prefix
			b, _ := hex.DecodeString((p + h[len(p):])[:64])
			copy(id[:], b)
		}
		in := bytes.Compare(id[:], lo) >= 0 && (hi == nil || bytes.Compare(id[:], hi) < 0)
		if want := strings.HasPrefix(id.Hex(), p); in != want {
			t.Fatalf("prefix %q: id %s in [%x, %x) = %v, want %v", p, id.Hex(), lo, hi, in, want)
		}
	})
}

// TestSchemaStatementsRefuseOddNames: AddColumn and AddIndex paste their
// names into SQL: anything but a lower-case name is a programming error,
// refused before any SQL is made.
func TestSchemaStatementsRefuseOddNames(t *testing.T) {
	for _, f := range []func(){
		func() { AddColumn("t'; DROP TABLE x; --", "c", "INT") },
		func() { AddColumn("t", "Mixed", "INT") },
		func() { AddIndex("i$$", "ON t (a)") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("an odd name made SQL")
				}
			}()
			f()
		}()
	}
	if s := AddColumn("cluster_jobs", "taken", "BOOLEAN"); !strings.Contains(s, "pg_catalog.pg_attribute") {
		t.Fatalf("AddColumn: %s", s)
	}
}
