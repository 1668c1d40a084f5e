package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkClusterCollect: what a collection of a cluster's blob store
// (sandbox cluster gc --dry-run, one process each) costs with four kept
// sandboxes of 256 files of 256 KiB each (64 MiB apiece) in a
// file:// store, reading each sandbox's object list, and reading each
// bundle as an earlier version's rows made it (their lists taken out of
// the rows).
func BenchmarkClusterCollect(b *testing.B) {
	_, dsn := clusterDB(b)
	blobs := "file://" + b.TempDir()
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
	if _, err := conn.Exec(context.Background(), `UPDATE cluster_sandboxes SET objects = ''`); err != nil {
		b.Fatal(err)
	}
	b.Run("bundle", gc)
}
