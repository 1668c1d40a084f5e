package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
)

// TestServeJoinsACluster: `serve --cluster DSN` registers the host in
// the cluster's PostgreSQL (a real server, started here), under its own
// key, with the tiers its probes earned, and `cluster hosts` lists it
// from its signed row; a DSN that reaches no server is refused, saying
// why.
func TestServeJoinsACluster(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dsn := pg.NewDatabase(t)
	home := t.TempDir()
	out, _, code := runCLI(t, home, "", "key")
	if code != 0 {
		t.Fatalf("sandbox key: exit %d", code)
	}
	pub := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
	startServe(t, home, "--cluster", dsn)
	var hosts []struct {
		Key      string
		Tiers    []any
		Capacity int
	}
	for i := 0; ; i++ { // the join follows the socket: a bound, not a measure
		out, errOut, code := runCLI(t, t.TempDir(), "", "cluster", "hosts", "--cluster", dsn, "--json")
		if code != 0 {
			t.Fatalf("cluster hosts: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &hosts); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if len(hosts) == 1 || i == 600 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(hosts) != 1 || hosts[0].Key != pub || len(hosts[0].Tiers) == 0 || hosts[0].Capacity != 1024 {
		t.Fatalf("the cluster's hosts: %+v, want this host's key %s", hosts, pub)
	}
	_, errOut, code := runCLI(t, t.TempDir(), "", "cluster", "hosts", "--cluster", "host=/nonexistent user=postgres dbname=x connect_timeout=5")
	if code == 0 || !strings.Contains(errOut, "cluster") {
		t.Fatalf("a cluster that is not there: exit %d: %s", code, errOut)
	}
}
