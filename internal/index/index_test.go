package index

import (
	"os"
	"path/filepath"
	"testing"

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
