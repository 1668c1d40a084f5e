package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// Blobs checks a content-addressed store: what is put is got back by its
// address, once, and nothing else is.
func Blobs(t *testing.T, open func(t *testing.T) store.Blobs) {
	t.Run("round trip", func(t *testing.T) {
		b := open(t)
		data := []byte("a blob")
		a := addr.Of(data)
		if b.HasBlob(a) {
			t.Fatal("an empty store has the blob")
		}
		if err := b.PutBlob(a, data); err != nil {
			t.Fatal(err)
		}
		if err := b.PutBlob(a, data); err != nil {
			t.Fatalf("a second put: %v", err)
		}
		got, err := b.Blob(a)
		if err != nil || !bytes.Equal(got, data) || !b.HasBlob(a) {
			t.Fatalf("get: %q %v", got, err)
		}
	})
	t.Run("empty blob", func(t *testing.T) {
		b := open(t)
		a := addr.Of(nil)
		if err := b.PutBlob(a, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Blob(a); err != nil || len(got) != 0 {
			t.Fatalf("%q %v", got, err)
		}
	})
	t.Run("absent", func(t *testing.T) {
		b := open(t)
		if _, err := b.Blob(addr.Of([]byte("never put"))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("an absent blob: %v (want one wrapping fs.ErrNotExist)", err)
		}
	})
	t.Run("bytes not the address's are refused", func(t *testing.T) {
		b := open(t)
		a := addr.Of([]byte("the real bytes"))
		if err := b.PutBlob(a, []byte("other bytes")); err == nil {
			t.Fatal("stored bytes under another's address")
		}
		if b.HasBlob(a) {
			t.Fatal("a refused put left the blob")
		}
	})
	t.Run("concurrent puts", func(t *testing.T) {
		b := open(t)
		if err := parallel(64, func(i int) error {
			d := []byte(fmt.Sprintf("blob %d", i%8)) // eight blobs, each put eight times
			return b.PutBlob(addr.Of(d), d)
		}); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			d := []byte(fmt.Sprintf("blob %d", i))
			if got, err := b.Blob(addr.Of(d)); err != nil || !bytes.Equal(got, d) {
				t.Fatalf("blob %d: %q %v", i, got, err)
			}
		}
	})
}

// run is a run row for the suite: run n, started at n seconds.
func run(n int, status attest.Status, exit *int) store.IndexedRun {
	return store.IndexedRun{
		ID: addr.Of([]byte(fmt.Sprintf("run %d", n))), Started: time.Unix(int64(1_700_000_000+n), 123456789).UTC(),
		Tier: tier.Tier(n % 8), Status: status, Exit: exit, Entry: fmt.Sprintf("prog-%d", n),
	}
}

func ids(rs []store.IndexedRun) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID.Hex()[:8]
	}
	return out
}

// Index checks an index: rows come back as they were put, newest first,
// filtered and limited; pending rows and rebuilds behave as package
// index says; records are kept by id.
func Index(t *testing.T, open func(t *testing.T) store.Index) {
	zero, three := 0, 3
	t.Run("rows round trip, newest first", func(t *testing.T) {
		x := open(t)
		want := []store.IndexedRun{run(1, attest.Exited, &zero), run(3, attest.Exited, &three), run(2, attest.Killed, nil)}
		want[2].Damaged = "missing receipt.json"
		for _, r := range want {
			if err := x.PutRun(r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := x.Runs(store.RunQuery{})
		if err != nil || len(got) != 3 {
			t.Fatalf("%d rows, %v", len(got), err)
		}
		order := []store.IndexedRun{want[1], want[2], want[0]}
		for i, r := range got {
			w := order[i]
			if r.ID != w.ID || !r.Started.Equal(w.Started) || r.Tier != w.Tier || r.Status != w.Status || r.Entry != w.Entry || r.Damaged != w.Damaged || r.Pending {
				t.Fatalf("row %d: %+v, want %+v", i, r, w)
			}
			if (r.Exit == nil) != (w.Exit == nil) || (r.Exit != nil && *r.Exit != *w.Exit) {
				t.Fatalf("row %d: exit %v, want %v", i, r.Exit, w.Exit)
			}
		}
	})
	t.Run("same start: by id", func(t *testing.T) {
		x := open(t)
		a, b := run(1, attest.Exited, &zero), run(2, attest.Exited, &zero)
		b.Started = a.Started
		x.PutRun(a)
		x.PutRun(b)
		got, _ := x.Runs(store.RunQuery{})
		if len(got) != 2 || got[0].ID.Hex() > got[1].ID.Hex() {
			t.Fatalf("%v", ids(got))
		}
	})
	t.Run("limit and prefix", func(t *testing.T) {
		x := open(t)
		var all []store.IndexedRun
		for i := range 50 {
			r := run(i, attest.Exited, &zero)
			all = append(all, r)
			if err := x.PutRun(r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := x.Runs(store.RunQuery{Limit: 5})
		if err != nil || len(got) != 5 || got[0].ID != all[49].ID || got[4].ID != all[45].ID {
			t.Fatalf("limit 5: %v %v", ids(got), err)
		}
		p := all[17].ID.Hex()[:6]
		got, err = x.Runs(store.RunQuery{Prefix: p})
		if err != nil || len(got) != 1 || got[0].ID != all[17].ID {
			t.Fatalf("prefix %s: %v %v", p, ids(got), err)
		}
		if got, err := x.Runs(store.RunQuery{Prefix: "ffffffffffff"}); err != nil || len(got) != 0 {
			t.Fatalf("a prefix of nothing: %v %v", ids(got), err)
		}
		if _, err := x.Runs(store.RunQuery{Prefix: "x' OR 1=1 --"}); err == nil {
			t.Fatal("a prefix that is not hex was taken")
		}
	})
	t.Run("pending, committed, dropped", func(t *testing.T) {
		x := open(t)
		r := run(1, attest.Exited, &zero)
		r.Pending = true
		x.PutRun(r)
		got, _ := x.Runs(store.RunQuery{})
		if len(got) != 1 || !got[0].Pending {
			t.Fatalf("pending: %+v", got)
		}
		if err := x.CommitRun(r.ID); err != nil {
			t.Fatal(err)
		}
		got, _ = x.Runs(store.RunQuery{})
		if len(got) != 1 || got[0].Pending {
			t.Fatalf("committed: %+v", got)
		}
		if err := x.DropRun(r.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := x.Runs(store.RunQuery{}); len(got) != 0 {
			t.Fatalf("dropped: %+v", got)
		}
		if err := x.CommitRun(r.ID); err != nil {
			t.Fatalf("committing a row that is not there: %v", err)
		}
	})
	t.Run("a put replaces", func(t *testing.T) {
		x := open(t)
		r := run(1, attest.Exited, &zero)
		x.PutRun(r)
		r.Damaged = "now damaged"
		x.PutRun(r)
		got, _ := x.Runs(store.RunQuery{})
		if len(got) != 1 || got[0].Damaged != "now damaged" {
			t.Fatalf("%+v", got)
		}
	})
	t.Run("rebuild", func(t *testing.T) {
		x := open(t)
		if ok, err := x.Complete(); err != nil || ok {
			t.Fatalf("a new index is complete: %v %v", ok, err)
		}
		old := run(1, attest.Exited, &zero)
		x.PutRun(old) // gone from the store: the scan does not find it
		time.Sleep(2 * time.Millisecond)
		since := time.Now()
		time.Sleep(2 * time.Millisecond)
		during := run(2, attest.Exited, &zero) // indexed by another process during the scan
		x.PutRun(during)
		scanned := run(3, attest.Exited, &zero)
		if err := x.Rebuild([]store.IndexedRun{scanned}, since); err != nil {
			t.Fatal(err)
		}
		got, _ := x.Runs(store.RunQuery{})
		if len(got) != 2 || got[0].ID != scanned.ID || got[1].ID != during.ID {
			t.Fatalf("after a rebuild: %v", ids(got))
		}
		if ok, err := x.Complete(); err != nil || !ok {
			t.Fatalf("a rebuilt index is not complete: %v %v", ok, err)
		}
	})
	t.Run("concurrent writers", func(t *testing.T) {
		x := open(t)
		if err := parallel(200, func(i int) error {
			r := run(i, attest.Exited, &zero)
			r.Pending = true
			if err := x.PutRun(r); err != nil {
				return err
			}
			return x.CommitRun(r.ID)
		}); err != nil {
			t.Fatal(err)
		}
		got, err := x.Runs(store.RunQuery{})
		if err != nil || len(got) != 200 {
			t.Fatalf("%d rows, %v", len(got), err)
		}
		for _, r := range got {
			if r.Pending {
				t.Fatalf("a committed row is pending: %+v", r)
			}
		}
	})
	t.Run("records", func(t *testing.T) {
		x := open(t)
		a := store.IndexedRecord{ID: "sb-b", Phase: "active", Head: addr.Of([]byte("h1")), Segments: 1, Updated: time.Unix(1, 0).UTC()}
		b := store.IndexedRecord{ID: "sb-a", Phase: "parked", Head: addr.Of([]byte("h2")), Segments: 3, Executed: 1, Updated: time.Unix(2, 5).UTC()}
		x.PutRecord(a)
		x.PutRecord(b)
		a.Phase, a.Segments, a.Executed = "ended", 4, 2
		x.PutRecord(a)
		got, err := x.Records()
		if err != nil || len(got) != 2 || got[0] != b || got[1] != a {
			t.Fatalf("%+v %v", got, err)
		}
		if ok, err := x.RecordsComplete(); err != nil || ok {
			t.Fatalf("records complete before a rebuild: %v %v", ok, err)
		}
		time.Sleep(2 * time.Millisecond)
		since := time.Now()
		time.Sleep(2 * time.Millisecond)
		c := store.IndexedRecord{ID: "sb-c", Phase: "active", Head: addr.Of([]byte("h3")), Updated: time.Unix(3, 0).UTC()}
		x.PutRecord(c) // during the scan
		if err := x.RebuildRecords([]store.IndexedRecord{a}, since); err != nil {
			t.Fatal(err)
		}
		got, _ = x.Records()
		if len(got) != 2 || got[0] != a || got[1] != c {
			t.Fatalf("after a rebuild: %+v", got)
		}
		if ok, err := x.RecordsComplete(); err != nil || !ok {
			t.Fatalf("records not complete after a rebuild: %v %v", ok, err)
		}
	})
}

// parallel runs f(0..n-1) at once and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Collectable checks a store a collector sweeps: it lists each blob
// put, once, and nothing it did not put; a removed blob is gone, listed
// no more, and can be put again; removing one that is not there is no
// error; an error from the caller's function ends the listing.
func Collectable(t *testing.T, open func(t *testing.T) store.Collectable) {
	list := func(t *testing.T, b store.Collectable) map[addr.Addr]int {
		t.Helper()
		got := map[addr.Addr]int{}
		if err := b.EachBlob(context.Background(), func(a addr.Addr) error { got[a]++; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Run("lists what was put", func(t *testing.T) {
		b := open(t)
		if got := list(t, b); len(got) != 0 {
			t.Fatalf("an empty store lists %v", got)
		}
		const n = 1100 // more than a page of each backend's listing (1,000 or 1,024)
		sem := make(chan struct{}, 16)
		if err := parallel(n, func(i int) error {
			sem <- struct{}{}
			defer func() { <-sem }()
			d := []byte(fmt.Sprintf("blob %d", i))
			return b.PutBlob(addr.Of(d), d)
		}); err != nil {
			t.Fatal(err)
		}
		want := map[addr.Addr]int{}
		for i := range n {
			want[addr.Of([]byte(fmt.Sprintf("blob %d", i)))] = 1
		}
		if got := list(t, b); !maps.Equal(got, want) {
			t.Fatalf("listed %v, want %v", got, want)
		}
	})
	t.Run("remove", func(t *testing.T) {
		b := open(t)
		keep, drop := []byte("kept"), []byte("removed")
		for _, d := range [][]byte{keep, drop} {
			if err := b.PutBlob(addr.Of(d), d); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.RemoveBlobContext(context.Background(), addr.Of(drop)); err != nil {
			t.Fatal(err)
		}
		if b.HasBlob(addr.Of(drop)) {
			t.Fatal("a removed blob is still there")
		}
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.RemoveBlobContext(ended, addr.Of(keep)); err == nil || !b.HasBlob(addr.Of(keep)) {
			t.Fatalf("a remove under an ended context: %v, kept %v", err, b.HasBlob(addr.Of(keep)))
		}
		if _, err := b.Blob(addr.Of(drop)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("reading a removed blob: %v (want one wrapping fs.ErrNotExist)", err)
		}
		if got := list(t, b); !maps.Equal(got, map[addr.Addr]int{addr.Of(keep): 1}) {
			t.Fatalf("after a removal, listed %v", got)
		}
		if err := b.RemoveBlobContext(context.Background(), addr.Of(drop)); err != nil {
			t.Fatalf("removing a blob a second time: %v", err)
		}
		if err := b.RemoveBlobContext(context.Background(), addr.Of([]byte("never put"))); err != nil {
			t.Fatalf("removing a blob never put: %v", err)
		}
		if err := b.PutBlob(addr.Of(drop), drop); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Blob(addr.Of(drop)); err != nil || !bytes.Equal(got, drop) {
			t.Fatalf("put again after its removal: %q %v", got, err)
		}
	})
	t.Run("an error ends the listing", func(t *testing.T) {
		b := open(t)
		for i := range 3 {
			d := []byte(fmt.Sprintf("blob %d", i))
			if err := b.PutBlob(addr.Of(d), d); err != nil {
				t.Fatal(err)
			}
		}
		stop := errors.New("stop")
		n := 0
		err := b.EachBlob(context.Background(), func(addr.Addr) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Fatalf("EachBlob went on after an error: %d calls, %v", n, err)
		}
	})
}
