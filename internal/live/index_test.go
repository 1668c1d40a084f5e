package live

import (
	"context"
	"os"
	"testing"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// runHello seals one S2 run of the hello guest.
func runHello(t *testing.T, h *Manager, who string) *host.Run {
	t.Helper()
	r, err := h.Run(context.Background(), host.Request{Kind: tier.Wasm, Image: image(t, "hello"), Entry: "hello", Args: []string{"hello", who}, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The index lists exactly the committed runs, as a scan does: a pending
// row whose directory is there is a run committed by a process that
// died before it said so; one whose directory is not is never listed;
// an index that is lost, stale or unreadable is rebuilt from the runs.
func TestIndexListsTheCommittedRuns(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	if err := host.OpenIndex(h.Store); err != nil {
		t.Fatal(err)
	}
	defer func() { h.Store.Index.Close() }()
	var ids []addr.Addr
	for _, who := range []string{"a", "b", "c"} {
		ids = append(ids, runHello(t, h, who).ID)
	}
	scan, err := h.Store.Scan()
	if err != nil || len(scan) != 3 {
		t.Fatalf("scan: %d %v", len(scan), err)
	}
	same := func(why string) {
		t.Helper()
		got, err := h.Runs()
		if err != nil || len(got) != len(scan) {
			t.Fatalf("%s: %d runs listed, %d stored (%v)", why, len(got), len(scan), err)
		}
		for i := range got {
			g, s := got[i], scan[i]
			if g.ID != s.ID || g.Dir != s.Dir || g.Tier != s.Tier || g.Status != s.Status || !g.Started.Equal(s.Started) || g.Entry != s.Entry || *g.Exit != *s.Exit {
				t.Fatalf("%s: row %d is %+v; the scan says %+v", why, i, g, s)
			}
		}
	}
	// The first listing found the index empty and incomplete, and
	// rebuilt it; from then on it is read.
	same("indexed as they were sealed")
	if ok, _ := h.Store.Index.Complete(); !ok {
		t.Fatal("the index is not complete after a listing")
	}
	runHello(t, h, "d")
	scan, _ = h.Store.Scan()
	same("a run sealed since")

	// A pending row of a run that is not there: not listed.
	ghost := store.IndexedRun{ID: addr.Of([]byte("never committed")), Status: "exited", Pending: true}
	h.Store.Index.PutRun(ghost)
	same("a pending row of nothing")
	// A pending row of a run that is there: listed, and made final.
	row := store.RowOf(h.Store.Path("runs", ids[0].Hex()), ids[0])
	row.Pending = true
	h.Store.Index.PutRun(*row)
	same("a pending row of a stored run")
	rows, _ := h.Store.Index.Runs(store.RunQuery{Prefix: ids[0].Hex()})
	if len(rows) != 1 || rows[0].Pending {
		t.Fatalf("the pending row was not made final: %+v", rows)
	}
	// Resolve reads it too.
	if dir, err := h.Resolve(ids[1].Hex()[:8]); err != nil || dir != h.Store.Path("runs", ids[1].Hex()) {
		t.Fatalf("resolve: %s %v", dir, err)
	}
	if dir, err := h.Resolve("last"); err != nil || dir != scan[0].Dir {
		t.Fatalf("resolve last: %s %v", dir, err)
	}

	// Lost: rebuilt.
	h.Store.Index.Close()
	for _, s := range []string{"", "-wal", "-shm"} {
		os.Remove(h.Store.IndexPath() + s)
	}
	if err := host.OpenIndex(h.Store); err != nil {
		t.Fatal(err)
	}
	same("after the index was lost")
	// Unreadable: moved aside, made again, rebuilt.
	h.Store.Index.Close()
	for _, s := range []string{"-wal", "-shm"} {
		os.Remove(h.Store.IndexPath() + s)
	}
	os.WriteFile(h.Store.IndexPath(), []byte("garbage, not a database: garbage garbage garbage garbage garbage"), 0o600)
	if err := host.OpenIndex(h.Store); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.Store.IndexPath() + ".unreadable"); err != nil {
		t.Fatal("the unreadable index was not kept aside")
	}
	same("after the index was unreadable")
	// Stale (a write that failed): rebuilt by the next listing.
	h.Store.Index.DropRun(ids[2])
	os.WriteFile(h.Store.Path("index.stale"), []byte("a write failed\n"), 0o600)
	same("after a failed write")
	if _, err := os.Stat(h.Store.Path("index.stale")); err == nil {
		t.Fatal("the stale mark is still there")
	}
}

// The suspended sandboxes are listed from the index's record rows, kept
// as each segment is appended; without them, every record is read once
// and the rows rebuilt.
func TestIndexKeepsRecordPhases(t *testing.T) {
	t.Parallel()
	h := newS1Host(t)
	if err := host.OpenIndex(h.Store); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Create(ctx, SandboxSpec{Tier: tier.S2, Grants: grants(t)})
	if err != nil {
		t.Fatal(err)
	}
	if l := h.Suspended(""); len(l) != 0 { // the first look reads every record
		t.Fatalf("%+v", l)
	}
	if ok, _ := h.Store.Index.RecordsComplete(); !ok {
		t.Fatal("records not complete after a listing")
	}
	if _, err := h.Suspend(ctx, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	if l := h.Suspended(""); len(l) != 1 || l[0].ID != a.ID {
		t.Fatalf("after a suspension: %+v", l)
	}
	rows, _ := h.Store.Index.Records()
	phases := map[string]string{}
	for _, r := range rows {
		phases[r.ID] = r.Phase
	}
	if phases[a.ID] != "parked" || phases[b.ID] != "active" {
		t.Fatalf("rows: %v", phases)
	}
	if _, err := h.Resume(ctx, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	if l := h.Suspended(""); len(l) != 0 {
		t.Fatalf("after resume: %+v", l)
	}
	if err := h.Remove(b.ID, ""); err != nil {
		t.Fatal(err)
	}
	rows, _ = h.Store.Index.Records()
	for _, r := range rows {
		phases[r.ID] = r.Phase
	}
	if phases[a.ID] != "active" || phases[b.ID] != "closed" {
		t.Fatalf("rows: %v", phases)
	}
}
