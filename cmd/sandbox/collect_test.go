package main

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkClusterCollect: what a collection of a cluster's blob store
// (sandbox cluster gc --dry-run, one process each) costs with four kept
// sandboxes of 256 files of 256 KiB each (64 MiB apiece) in a
// file:// store, reading each sandbox's object list, and reading each
// bundle where no list can be used (each list spoiled in the store).
func BenchmarkClusterCollect(b *testing.B) {
	_, dsn := clusterDB(b)
	dir := b.TempDir()
	blobs := "file://" + dir
	a, _, _ := twoHosts(b, dsn, nil, "--blobs", blobs)
	for range 4 {
		out, e, code := runCLI(b, a, "", "create")
		if code != 0 {
			b.Fatalf("create: %d %s", code, e)
		}
		id := strings.TrimSpace(out)
		if _, e, code := runCLI(b, a, "", "exec", "-q", id, "--", "sh", "-c", "for i in $(seq 256); do head -c 262144 /dev/urandom > f$i; done"); code != 0 {
			b.Fatalf("exec: %d %s", code, e)
		}
		if _, e, code := runCLI(b, a, "", "suspend", id); code != 0 {
			b.Fatalf("suspend: %d %s", code, e)
		}
	}
	gc := func(b *testing.B) {
		for b.Loop() {
			out, err := cliCmd(b, a, nil, "cluster", "gc", "--dry-run", "--cluster", dsn, "--blobs", blobs).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "named by 4 kept sandboxes") {
				b.Fatalf("cluster gc: %v %s", err, out)
			}
		}
	}
	b.Run("list", gc)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT objects FROM cluster_sandboxes`)
	if err != nil {
		b.Fatal(err)
	}
	lists, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil || len(lists) != 4 {
		b.Fatalf("the object lists: %d %v", len(lists), err)
	}
	for _, l := range lists {
		p := filepath.Join(dir, "blobs", hex.EncodeToString(l))
		if err := os.Remove(p); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("sandbox-objects/1\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("bundle", gc)
}

// TestAttackSpoiledObjectList: someone who can write the cluster's blob
// store puts other bytes under a suspension's object list. A collection
// then reads that sandbox's bundle instead, says so, and removes only
// what no one names; the sandbox still moves, and its next suspension
// names a list again.
func TestAttackSpoiledObjectList(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	dir := t.TempDir()
	blobs := "file://" + dir
	a, b, _ := twoHosts(t, dsn, nil, "--blobs", blobs)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := createWriting(t, a, "kept")
	objects := func() []byte {
		t.Helper()
		var o []byte
		if err := conn.QueryRow(context.Background(), `SELECT objects FROM cluster_sandboxes WHERE id = $1`, id).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if _, e, code := runCLI(t, a, "", "suspend", id); code != 0 {
		t.Fatalf("suspend: %d %s", code, e)
	}
	list := objects()
	if len(list) != 32 {
		t.Fatalf("the suspension's row names no object list: %x", list)
	}
	p := filepath.Join(dir, "blobs", hex.EncodeToString(list))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("sandbox-objects/1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := cliCmd(t, a, nil, "cluster", "gc", "--cluster", dsn, "--blobs", blobs).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "object list could not be used") || !strings.Contains(string(out), "named by 1 kept sandboxes") {
		t.Fatalf("a collection with a kept sandbox's list spoiled: %v %s", err, out)
	}
	if _, e, code := runCLI(t, b, "", "resume", id); code != 0 {
		t.Fatalf("resume on B after the collection: %d %s", code, e)
	}
	if out := catF(t, b, id); out != "kept\n" {
		t.Fatalf("on B: %q", out)
	}
	if _, e, code := runCLI(t, b, "", "suspend", id); code != 0 {
		t.Fatalf("suspend on B: %d %s", code, e)
	}
	if o := objects(); len(o) != 32 || string(o) == string(list) {
		t.Fatalf("the next suspension's list: %x (the spoiled one was %x)", o, list)
	}
}
