package index

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// BenchmarkRuns reads 100,000 run rows: all of them, and the newest 50.
func BenchmarkRuns(b *testing.B) {
	db, err := Open(filepath.Join(b.TempDir(), "index.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	rows := make([]store.IndexedRun, 100_000)
	zero := 0
	for i := range rows {
		rows[i] = store.IndexedRun{ID: addr.Of([]byte(fmt.Sprint(i))), Started: time.Unix(1_700_000_000+int64(i), 0), Tier: tier.S2, Status: attest.Exited, Exit: &zero, Entry: "hello.wasm"}
	}
	if err := db.Rebuild(rows, time.Now()); err != nil {
		b.Fatal(err)
	}
	for _, q := range []store.RunQuery{{}, {Limit: 50}} {
		b.Run(fmt.Sprintf("limit=%d", q.Limit), func(b *testing.B) {
			for b.Loop() {
				if _, err := db.Runs(q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCommit is what a sealed run costs the index: its pending row,
// then the row made final.
func BenchmarkCommit(b *testing.B) {
	db, err := Open(filepath.Join(b.TempDir(), "index.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	zero, i := 0, 0
	for b.Loop() {
		i++
		r := store.IndexedRun{ID: addr.Of([]byte(fmt.Sprint(i))), Started: time.Now(), Tier: tier.S2, Status: attest.Exited, Exit: &zero, Entry: "hello.wasm", Pending: true}
		if err := db.PutRun(r); err != nil {
			b.Fatal(err)
		}
		if err := db.CommitRun(r.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen is what a process pays to open the index.
func BenchmarkOpen(b *testing.B) {
	p := filepath.Join(b.TempDir(), "index.db")
	db, _ := Open(p)
	db.Close()
	for b.Loop() {
		db, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
}

// BenchmarkOneShot is what a one-shot run's process pays the index: open
// it, index one run, close it.
func BenchmarkOneShot(b *testing.B) {
	p := filepath.Join(b.TempDir(), "index.db")
	db, _ := Open(p)
	db.Close()
	zero, i := 0, 0
	for b.Loop() {
		i++
		db, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		r := store.IndexedRun{ID: addr.Of([]byte(fmt.Sprint(i))), Started: time.Now(), Tier: tier.S2, Status: attest.Exited, Exit: &zero, Entry: "hello.wasm", Pending: true}
		db.PutRun(r)
		db.CommitRun(r.ID)
		db.Close()
	}
}
