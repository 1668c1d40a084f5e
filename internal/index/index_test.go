package index

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/storetest"
)

func open(t *testing.T) store.Index {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) { storetest.Index(t, open) }

// Two handles on one file (two processes) see each other's rows.
func TestTwoHandles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "index.db")
	a, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	zero := 0
	r := store.IndexedRun{Status: "exited", Exit: &zero, Entry: "x"}
	r.ID[0] = 1
	if err := a.PutRun(r); err != nil {
		t.Fatal(err)
	}
	got, err := b.Runs(store.RunQuery{})
	if err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
}

// An index of another schema, or a file that is no SQLite database, is
// refused, naming it: the host moves it aside and makes a new one.
func TestRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte("this is not a database, and it is long enough to have a header of some kind"), 0o600)
	if _, err := Open(junk); err == nil {
		t.Fatal("opened a file that is no database")
	}
	other := filepath.Join(dir, "other.db")
	db, err := Open(other)
	if err != nil {
		t.Fatal(err)
	}
	db.db.Exec(`UPDATE meta SET v = 'sandbox.index/0' WHERE k = 'schema'`)
	db.Close()
	if _, err := Open(other); err == nil {
		t.Fatal("opened an index of another schema")
	}
}

// A run row's line is read back from disk: unpack never panics, and a
// line it takes packs back to itself.
func FuzzUnpack(f *testing.F) {
	zero := 0
	r := store.IndexedRun{Status: "exited", Exit: &zero, Entry: "hello.wasm", Damaged: "missing receipt.cose", Pending: true}
	r.ID[5] = 9
	f.Add(pack(r))
	r.Exit, r.Status = nil, ""
	f.Add(pack(r))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unpack(b)
		if err != nil {
			return
		}
		if got := pack(r); !bytes.Equal(got, b) {
			t.Fatalf("%x unpacked to %+v, which packs to %x", b, r, got)
		}
	})
}

func TestPrefixRange(t *testing.T) {
	for _, c := range []struct{ p, lo, hi string }{
		{"ab", "ab", "ac"}, {"abc", "abc0", "abd0"}, {"abf", "abf0", "ac00"}, {"ff", "ff", ""}, {"fff", "fff0", ""}, {"0", "00", "10"}, {"a", "a0", "b0"},
	} {
		lo, hi, err := prefixRange(c.p)
		if err != nil || fmt.Sprintf("%x", lo) != c.lo || fmt.Sprintf("%x", hi) != c.hi {
			t.Errorf("%s: %x %x %v, want %s %s", c.p, lo, hi, err, c.lo, c.hi)
		}
	}
	for _, p := range []string{"", "AB", "xyz", strings.Repeat("a", 65)} {
		if _, _, err := prefixRange(p); err == nil {
			t.Errorf("%q taken", p)
		}
	}
}

// Nothing is fsynced, so an index opened in another boot of the machine
// (it may have gone down with rows unwritten) is incomplete until the
// next listing rebuilds it.
func TestAnotherBootRebuilds(t *testing.T) {
	defer func(f func() string) { bootID = f }(bootID)
	bootID = func() string { return "boot-a" }
	p := filepath.Join(t.TempDir(), "index.db")
	db, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	db.Rebuild(nil, time.Now())
	db.RebuildRecords(nil, time.Now())
	db.Close()
	if db, _ = Open(p); !mustComplete(t, db) {
		t.Fatal("the same boot: incomplete")
	}
	db.Close()
	bootID = func() string { return "boot-b" }
	db, _ = Open(p)
	defer db.Close()
	if mustComplete(t, db) {
		t.Fatal("another boot: still complete")
	}
	if ok, _ := db.RecordsComplete(); ok {
		t.Fatal("another boot: records still complete")
	}
}

func mustComplete(t *testing.T, db *DB) bool {
	t.Helper()
	ok, err := db.Complete()
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
