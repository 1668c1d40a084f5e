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
