package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
	"github.com/opensubstrate/sandbox/internal/store/s3blobs/s3test"
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
	if out, e, code := runCLI(t, t.TempDir(), "", "cluster", "trail", "--cluster", dsn); code != 0 || out != "" || !strings.Contains(e, "0 entries") {
		t.Fatalf("cluster trail of a cluster with no S7 run: %d %q %s", code, out, e)
	}
	_, errOut, code := runCLI(t, t.TempDir(), "", "cluster", "hosts", "--cluster", "host=/nonexistent user=postgres dbname=x connect_timeout=5")
	if code == 0 || !strings.Contains(errOut, "cluster") {
		t.Fatalf("a cluster that is not there: exit %d: %s", code, errOut)
	}
}

// TestSandboxMovesAcrossHosts: two hosts of one cluster (two services,
// two state directories, one PostgreSQL), their bundles kept in the
// cluster's PostgreSQL, in a directory both mount (--blobs file:///DIR),
// and in an S3 bucket of a real S3 server (versitygw; --blobs s3://…).
// A sandbox suspended on A is resumed through B by itself: B fetches its
// bundle from the cluster's store, verifies its record from genesis
// under A's key (from A's signed host row), and continues it with its
// workspace; A can then neither resume it nor suspend it again while B
// holds it. Its record verifies with both hosts' keys.
func TestSandboxMovesAcrossHosts(t *testing.T) {
	t.Parallel()
	pg, _ := clusterDB(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		blobs func(t *testing.T) (args, env []string, kept func() int)
	}{
		{"postgres", func(t *testing.T) ([]string, []string, func() int) { return nil, nil, nil }},
		{"directory", func(t *testing.T) ([]string, []string, func() int) {
			return []string{"--blobs", "file://" + dir}, nil, func() int { return filesUnder(filepath.Join(dir, "blobs")) }
		}},
		{"s3", func(t *testing.T) ([]string, []string, func() int) {
			g := s3test.Start(t)
			bucket := g.Bucket()
			return []string{"--blobs", g.URL(bucket)}, g.Env(), func() int { return filesUnder(filepath.Join(g.Root, bucket)) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args, env, kept := c.blobs(t)
			moveAcross(t, pg.NewDatabase(t), env, args, kept)
		})
	}
}

// filesUnder counts the regular files beneath dir.
func filesUnder(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// moveAcross moves a sandbox from A to B and back through the cluster
// dsn names, with the blob store args name; kept (nil: not counted)
// counts the objects in that store. The store is collected on the way
// (sandbox cluster gc): while the sandbox is kept, only what no
// suspension names any more goes, and it moves again after; once it is
// closed, everything goes.
func moveAcross(t *testing.T, dsn string, env, args []string, kept func() int) {
	a, b, _ := twoHosts(t, dsn, env, args...)
	gc := func(want string, flags ...string) string {
		t.Helper()
		cmd := cliCmd(t, a, env, append(append([]string{"cluster", "gc", "--cluster", dsn}, args...), flags...)...)
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("cluster gc: %v %q, want %q", err, out, want)
		}
		return string(out)
	}
	id := createWriting(t, a, "travelled")
	// move suspends the sandbox through from, resumes it through to,
	// and reads its file there.
	move := func(from, to, what string) {
		t.Helper()
		if _, e, code := runCLI(t, from, "", "suspend", id); code != 0 {
			t.Fatalf("suspend, %s: %d %s", what, code, e)
		}
		if _, e, code := runCLI(t, to, "", "resume", id); code != 0 {
			t.Fatalf("resume, %s: %d %s", what, code, e)
		}
		if out := catF(t, to, id); out != "travelled\n" {
			t.Fatalf("%s: %q", what, out)
		}
	}
	move(a, b, "from A to B")
	if _, e, code := runCLI(t, a, "", "resume", id); code == 0 || !strings.Contains(e, "held by another host") {
		t.Fatalf("resume on A while B holds it: %d %s", code, e)
	}
	move(b, a, "back to A")
	// Kept object by object: the unit, the grants, trees and chunks
	// beside each suspension's bundle, not one whole bundle.
	if kept != nil {
		if n := kept(); n < 4 {
			t.Errorf("%d objects kept where --blobs says, want each suspension's objects one by one", n)
		}
	}
	// Collected while it is kept: A's first bundle and its object list,
	// which B's suspension replaced, go; what B's names stays, and it
	// moves again. A dry run first removes nothing.
	before := -1
	if kept != nil {
		before = kept()
	}
	gc("would remove 2\n", "--dry-run")
	if kept != nil && kept() != before {
		t.Fatalf("a dry run removed objects: %d, was %d", kept(), before)
	}
	gc("named by 1 kept sandboxes and 0 fleet results not yet taken: removed 2\n")
	move(a, b, "from A to B after a collection")
	runCLI(t, b, "", "close", id)
	// Closed: nothing of it is kept in the cluster's store.
	gc("named by 0 kept sandboxes")
	if kept != nil {
		if n := kept(); n != 0 {
			t.Errorf("%d objects left in the store once the only sandbox closed", n)
		}
	}
	gc("0 objects stored")
	if out, e, code := runCLI(t, b, "", "record", "verify", "--runs", "--trust-host", "--trust", filepath.Join(a, "host.pub"), id); code != 0 {
		t.Fatalf("the record with both keys: %d %s %s", code, out, e)
	}
}

// TestSandboxOfAKilledHostResumesElsewhere: the host running a sandbox
// is killed (SIGKILL) in the middle of an exec; once it has not
// heartbeaten for the cluster's dead-after (3 s here), the sandbox
// resumes through another host from its last suspension, said so: what
// it wrote after that suspension is gone, never silently kept or run
// twice. The killed host, started again, cannot resume it while the
// other holds it.
func TestSandboxOfAKilledHostResumesElsewhere(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	env := []string{"SANDBOX_CLUSTER_DEAD_AFTER=3s"}
	a, b, sa := twoHosts(t, dsn, env)
	id := createWriting(t, a, "suspended")
	if _, e, code := runCLI(t, a, "", "suspend", id); code != 0 {
		t.Fatalf("suspend on A: %d %s", code, e)
	}
	if _, e, code := runCLI(t, a, "", "resume", id); code != 0 {
		t.Fatalf("resume on A: %d %s", code, e)
	}
	runCLI(t, a, "", "exec", "-q", id, "--", "sh", "-c", "echo after > f")
	// An exec in flight, then A is killed.
	long := cliCmd(t, a, nil, "exec", "-q", id, "--", "sleep", "600")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { long.Process.Kill(); long.Wait() }()
	for i := 0; ; i++ { // the exec has started: a bound, not a measure
		out, _, _ := runCLI(t, a, "", "ps")
		if strings.Contains(out, id) || i == 200 {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	sa.Process.Kill()
	sa.Wait()
	var errOut string
	for i := 0; ; i++ { // until A's last heartbeat is 3 s old
		_, e, code := runCLI(t, b, "", "resume", id)
		if code == 0 {
			break
		}
		errOut = e
		if !strings.Contains(e, "held by another host") || i == 600 {
			t.Fatalf("resume through B: %d %s", code, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := catF(t, b, id); out != "suspended\n" {
		t.Fatalf("on B: %q (want the workspace of the last suspension)", out)
	}
	// A comes back: the sandbox is B's.
	startServeWith(t, a, env, "--cluster", dsn)
	if _, e, code := runCLI(t, a, "", "resume", id); code == 0 || !strings.Contains(e, "held by another host") {
		t.Fatalf("resume on A after it came back: %d %s", code, e)
	}
	runCLI(t, b, "", "close", id)
	if out, e, code := runCLI(t, b, "", "record", "verify", "--runs", "--trust-host", "--trust", filepath.Join(a, "host.pub"), id); code != 0 {
		t.Fatalf("the record on B with both keys: %d %s %s", code, out, e)
	}
}

// TestStoppedHostsSandboxesResumeElsewhere: a host of a cluster that is
// stopped (SIGTERM) suspends its live sandboxes and publishes them
// before it leaves the cluster, so another host resumes them with all
// they wrote.
func TestStoppedHostsSandboxesResumeElsewhere(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b, sa := twoHosts(t, dsn, nil)
	id := createWriting(t, a, "before the stop")
	sa.Process.Signal(syscall.SIGTERM)
	sa.Wait()
	if _, e, code := runCLI(t, b, "", "resume", id); code != 0 {
		t.Fatalf("resume through B after A stopped: %d %s", code, e)
	}
	if out := catF(t, b, id); out != "before the stop\n" {
		t.Fatalf("on B: %q", out)
	}
}

// clusterDB starts a PostgreSQL for the test and returns a database of
// its own; it skips where live S1 sandboxes cannot run.
func clusterDB(t testing.TB) (*pgtest.Server, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	return pg, pg.NewDatabase(t)
}

// twoHosts starts two services of the cluster dsn names, A and B, each
// with its own state directory, and returns their homes and A's process.
func twoHosts(t testing.TB, dsn string, env []string, args ...string) (a, b string, sa *exec.Cmd) {
	t.Helper()
	a, b = t.TempDir(), t.TempDir()
	args = append([]string{"--cluster", dsn}, args...)
	sa = startServeWith(t, a, env, args...)
	startServeWith(t, b, env, args...)
	return a, b, sa
}

// createWriting creates a sandbox through home's service and writes line
// to its file f.
func createWriting(t *testing.T, home, line string) string {
	t.Helper()
	out, e, code := runCLI(t, home, "", "create")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "exec", "-q", id, "--", "sh", "-c", "echo "+line+" > f"); code != 0 {
		t.Fatalf("exec: %d %s", code, e)
	}
	return id
}

// catF is the sandbox's file f, read through home's service.
func catF(t *testing.T, home, id string) string {
	t.Helper()
	out, e, _ := runCLI(t, home, "", "exec", "-q", id, "--", "cat", "f")
	if e != "" {
		t.Logf("cat f: %s", e)
	}
	return out
}

// TestFleetAcrossHosts: a fleet run through host A of a cluster whose
// A takes no items itself (--cluster-workers 0) is run by host B, taking
// the items from the cluster's queue: each item's run is sealed under
// B's key, handed back and kept on A after A checked it whole under the
// keys of the cluster's hosts; the fleet's checkpoint is A's, over items
// in index order, and verifies; a run is B's word, not A's (it does not
// verify under A's key alone). WebAssembly and native programs both
// travel.
func TestFleetAcrossHosts(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b := t.TempDir(), t.TempDir()
	startServeWith(t, a, nil, "--cluster", dsn, "--cluster-workers", "0")
	startServeWith(t, b, nil, "--cluster", dsn)
	in := filepath.Join(t.TempDir(), "inputs")
	os.WriteFile(in, []byte("a\nb\nc\nd\ne\n"), 0o600)
	for _, prog := range []string{guestPath(t, "hello"), "/bin/echo"} {
		out, e, code := runCLI(t, a, "", "fleet", "run", "--workers", "3", "--inputs", in, "--", prog)
		if code != 0 || !strings.Contains(out, "5 items (0 failed)") {
			t.Fatalf("fleet run of %s through A: %d %s %s", prog, code, out, e)
		}
		id := strings.Fields(out)[0]
		if out, e, code := runCLI(t, a, "", "fleet", "verify", id); code != 0 || !strings.HasPrefix(out, "OK    fleet") {
			t.Fatalf("fleet verify on A: %d %s %s", code, out, e)
		}
		items, err := os.ReadFile(filepath.Join(a, "fleets", id, "items.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(items)), "\n")
		if len(lines) != 5 {
			t.Fatalf("items: %q", items)
		}
		for i, line := range lines {
			var it struct {
				Index int
				Run   string
			}
			if err := json.Unmarshal([]byte(line), &it); err != nil || it.Index != i {
				t.Fatalf("item %d: %v %s", i, err, line)
			}
			dir := filepath.Join(a, "runs", strings.TrimPrefix(it.Run, "b3:"))
			if out, e, code := runCLI(t, a, "", "verify", "--trust", filepath.Join(b, "host.pub"), dir); code != 0 {
				t.Fatalf("item %d's run on A, under B's key: %d %s %s", i, code, out, e)
			}
			if out, _, code := runCLI(t, a, "", "verify", "--trust", filepath.Join(a, "host.pub"), dir); code == 0 {
				t.Fatalf("item %d's run verified under A's key alone: it is B's: %s", i, out)
			}
			if _, err := os.Stat(filepath.Join(b, "runs", strings.TrimPrefix(it.Run, "b3:"))); err != nil {
				t.Fatalf("item %d's run is not on B, which ran it: %v", i, err)
			}
		}
	}
}

// TestFleetOutlivesAStoppedHost: the host running a fleet's items is
// stopped (SIGTERM) in the middle: the items it held and had not
// finished go back to the queue, and another host, joining later, runs
// them; the fleet ends whole, every item once in its tree.
func TestFleetOutlivesAStoppedHost(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	startServeWith(t, a, nil, "--cluster", dsn, "--cluster-workers", "0")
	sb := startServeWith(t, b, nil, "--cluster", dsn, "--cluster-workers", "1")
	in := filepath.Join(t.TempDir(), "inputs")
	os.WriteFile(in, []byte("1\n2\n3\n4\n5\n6\n"), 0o600)
	type ran struct {
		out, e string
		code   int
	}
	done := make(chan ran, 1)
	go func() {
		out, e, code := runCLI(t, a, "", "fleet", "run", "--workers", "6", "--inputs", in, "--", "/bin/sh", "-c", "sleep 2; echo $0")
		done <- ran{out, e, code}
	}()
	// B stops once it finished an item (one at a time, 2 s each: it
	// would take 12 s to run all six), holding the next.
	for i := 0; runsIn(b) == 0; i++ {
		if i == 2400 {
			t.Fatal("B ran no item in 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	sb.Process.Signal(syscall.SIGTERM)
	sb.Wait()
	startServeWith(t, c, nil, "--cluster", dsn, "--cluster-workers", "4")
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "6 items (0 failed)") {
		t.Fatalf("the fleet: %d %s %s", r.code, r.out, r.e)
	}
	id := strings.Fields(r.out)[0]
	if out, e, code := runCLI(t, a, "", "fleet", "verify", id); code != 0 {
		t.Fatalf("fleet verify: %d %s %s", code, out, e)
	}
	if runsIn(c) == 0 {
		t.Fatalf("C ran none of the items B gave back")
	}
}

// runsIn counts the sealed runs in home's state directory.
func runsIn(home string) int {
	ents, _ := os.ReadDir(filepath.Join(home, "runs"))
	n := 0
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}

// TestAnyHostAnswers: a request for a sandbox another host of the
// cluster holds is forwarded there, as its caller's, signed by the
// forwarding host: exec with stdin, files both ways, suspension through
// B of a sandbox made on A; once it moved to B (resumed through B),
// A forwards to B; a close through A closes it on B, and no host
// resumes it after. A request that claims to be forwarded without a
// signature that holds is refused. Over the unix sockets the hosts
// register here, and over TLS (--listen, --cluster-ca) in the subtest.
func TestAnyHostAnswers(t *testing.T) {
	t.Parallel()
	pg, _ := clusterDB(t)
	t.Run("sockets", func(t *testing.T) {
		a, b, _ := twoHosts(t, pg.NewDatabase(t), nil)
		answers(t, a, b)
		forged(t, filepath.Join(a, "serve.sock"), "http://sandbox", nil)
	})
	t.Run("tls", func(t *testing.T) {
		dsn := pg.NewDatabase(t)
		certFile, keyFile, pool := selfSigned(t)
		tokens := filepath.Join(t.TempDir(), "tokens")
		os.WriteFile(tokens, []byte("a-token-of-sixteen-chars-or-more\n"), 0o600)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := ln.Addr().String()
		ln.Close()
		a, b := t.TempDir(), t.TempDir()
		startServeWith(t, a, nil, "--cluster", dsn, "--listen", listen, "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokens)
		startServeWith(t, b, nil, "--cluster", dsn, "--cluster-ca", certFile)
		answers(t, a, b)
		forged(t, "", "https://"+listen, pool)
	})
}

// answers drives a sandbox made on a through b, and back.
func answers(t *testing.T, a, b string) {
	t.Helper()
	id := createWriting(t, a, "made on A")
	if out := catF(t, b, id); out != "made on A\n" {
		t.Fatalf("exec through B: %q", out)
	}
	if out, e, code := runCLI(t, b, "piped through B", "exec", "-q", id, "--", "cat"); code != 0 || out != "piped through B" {
		t.Fatalf("exec with stdin through B: %d %q %s", code, out, e)
	}
	var sbs []struct{ ID, Workspace, Host, State string }
	out, _, _ := runCLI(t, a, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &sbs); err != nil || len(sbs) != 1 || sbs[0].Host != "" {
		t.Fatalf("ps on A: %v %s", err, out)
	}
	// B lists it too, on A; B alone has none.
	var onB []struct{ ID, Host, State string }
	out, _, _ = runCLI(t, b, "", "ps", "--json")
	if err := json.Unmarshal([]byte(out), &onB); err != nil || len(onB) != 1 || onB[0].ID != id || onB[0].Host == "" || onB[0].State != "live" {
		t.Fatalf("ps on B: %v %s", err, out)
	}
	if out, e, code := runCLI(t, b, "", "ps", "--here"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("ps --here on B: %d %s %s", code, out, e)
	}
	local := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(local, []byte("copied through B\n"), 0o600)
	if _, e, code := runCLI(t, b, "", "cp", local, id+":"+sbs[0].Workspace+"/in.txt"); code != 0 {
		t.Fatalf("cp in through B: %d %s", code, e)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	if _, e, code := runCLI(t, b, "", "cp", id+":"+sbs[0].Workspace+"/in.txt", back); code != 0 {
		t.Fatalf("cp out through B: %d %s", code, e)
	}
	if got, _ := os.ReadFile(back); string(got) != "copied through B\n" {
		t.Fatalf("copied back %q", got)
	}
	if _, e, code := runCLI(t, b, "", "suspend", id); code != 0 {
		t.Fatalf("suspend through B of A's sandbox: %d %s", code, e)
	}
	if _, e, code := runCLI(t, b, "", "resume", id); code != 0 {
		t.Fatalf("resume through B: %d %s", code, e)
	}
	if out := catF(t, a, id); out != "made on A\n" {
		t.Fatalf("exec through A once B holds it: %q", out)
	}
	if _, e, code := runCLI(t, a, "", "close", id); code != 0 {
		t.Fatalf("close through A of the sandbox B holds: %d %s", code, e)
	}
	for _, h := range []string{a, b} {
		if _, e, code := runCLI(t, h, "", "resume", id); code == 0 || !strings.Contains(e, "closed") {
			t.Fatalf("resume of a closed sandbox: %d %s", code, e)
		}
	}
}

// forged sends a request that says it was forwarded by a host of the
// cluster, with no signature that holds: refused, 403.
func forged(t *testing.T, socket, base string, pool *x509.CertPool) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	if socket != "" {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
	}
	req, _ := http.NewRequest("GET", base+"/v1/sandboxes", nil)
	req.Header.Set("Sandbox-Forwarded-By", strings.Repeat("ab", 32))
	req.Header.Set("Sandbox-Forwarded-For", "local")
	req.Header.Set("Sandbox-Forwarded-At", strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set("Sandbox-Forwarded-Sig", "AAAA")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "forwarded") {
		t.Fatalf("a forged forwarded request: %d %s", resp.StatusCode, body)
	}
}

// selfSigned writes a self-signed certificate for ips (default
// 127.0.0.1) and its key.
func selfSigned(t *testing.T, ips ...string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	var addrs []net.IP
	for _, ip := range ips {
		addrs = append(addrs, net.ParseIP(ip))
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandbox test host"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: addrs, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(k)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// TestSandboxesArePlaced: a sandbox created through any host of a
// cluster is placed, best of K, where one more sandbox carries the least
// of its host's idle power: with one sandbox live on B and none on A
// (the same rated idle power), a create through A is made on B, as the
// caller's, and B's record of it opens with the placement A signed (its
// candidates, their figures, why), sealed by B; it verifies, and the
// sandbox answers through A.
func TestSandboxesArePlaced(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b, _ := twoHosts(t, dsn, nil)
	first := createWriting(t, b, "on B")
	out, e, code := runCLI(t, a, "", "create")
	if code != 0 {
		t.Fatalf("create through A: %d %s", code, e)
	}
	id := strings.TrimSpace(out)
	if ids := psIDs(t, b); len(ids) != 2 || !slices.Contains(ids, id) || !slices.Contains(ids, first) {
		t.Fatalf("B holds %v, want %s and %s", ids, first, id)
	}
	if ids := psIDs(t, a); len(ids) != 0 {
		t.Fatalf("A holds %v", ids)
	}
	rec, err := os.ReadFile(filepath.Join(b, "records", id+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(rec)), "\n")
	var seg struct {
		Kind      string
		Placement struct {
			Host, By   string
			Candidates []struct {
				Host string
				Live int
			}
			Why string
		}
	}
	if len(lines) < 2 || json.Unmarshal([]byte(lines[1]), &seg) != nil || seg.Kind != "placed" {
		t.Fatalf("B's record of it: %s", rec)
	}
	aKey, bKey := pubKey(t, a), pubKey(t, b)
	if seg.Placement.By != aKey || seg.Placement.Host != bKey || len(seg.Placement.Candidates) != 2 || !strings.Contains(seg.Placement.Why, "over 2 runs") {
		t.Fatalf("the placement: %+v (A %s, B %s)", seg.Placement, aKey, bKey)
	}
	if _, e, code := runCLI(t, a, "", "exec", "-q", id, "--", "true"); code != 0 {
		t.Fatalf("exec through A: %d %s", code, e)
	}
	if out, e, code := runCLI(t, b, "", "record", "verify", id); code != 0 {
		t.Fatalf("record verify on B: %d %s %s", code, out, e)
	}
	// A resumption is placed the same way: through A, back on B, where
	// the other sandbox still shares the idle power; the placement
	// follows the Resumed segment. With --here it resumes on A.
	if _, e, code := runCLI(t, a, "", "suspend", id); code != 0 {
		t.Fatalf("suspend through A: %d %s", code, e)
	}
	if _, e, code := runCLI(t, a, "", "resume", id); code != 0 {
		t.Fatalf("resume through A: %d %s", code, e)
	}
	if ids := psIDs(t, b); !slices.Contains(ids, id) {
		t.Fatalf("the placed resumption is not on B: %v", ids)
	}
	rec, _ = os.ReadFile(filepath.Join(b, "records", id+".jsonl"))
	lines = strings.Split(strings.TrimSpace(string(rec)), "\n")
	if n := len(lines); n < 2 || !strings.Contains(lines[n-2], `"kind":"resumed"`) || !strings.Contains(lines[n-1], `"kind":"placed"`) || !strings.Contains(lines[n-1], `"by":"`+aKey) {
		t.Fatalf("the resumption's placement: %s", rec)
	}
	if _, e, code := runCLI(t, a, "", "suspend", id); code != 0 {
		t.Fatalf("suspend through A: %d %s", code, e)
	}
	if _, e, code := runCLI(t, a, "", "resume", "--here", id); code != 0 {
		t.Fatalf("resume --here on A: %d %s", code, e)
	}
	if ids := psIDs(t, a); !slices.Contains(ids, id) {
		t.Fatalf("resume --here: not on A: %v", ids)
	}
	if out, e, code := runCLI(t, a, "", "record", "verify", "--trust-host", "--trust", filepath.Join(b, "host.pub"), id); code != 0 {
		t.Fatalf("record verify on A with B's key: %d %s %s", code, out, e)
	}
}

// psIDs are the sandboxes home's service holds.
func psIDs(t *testing.T, home string) []string {
	t.Helper()
	var sbs []struct{ ID string }
	out, e, code := runCLI(t, home, "", "ps", "--here", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &sbs) != nil {
		t.Fatalf("ps: %d %s %s", code, out, e)
	}
	var ids []string
	for _, s := range sbs {
		ids = append(ids, s.ID)
	}
	return ids
}

// pubKey is home's host key, as "ed25519:HEX".
func pubKey(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "host.pub"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestTokensTravel: a token's principal is the same caller on every host
// of a cluster that has its token: its sandbox, suspended on A, resumes
// through B for it, and is refused to another token (as if it were not
// there); a request through A for it, once it is on B, is forwarded as
// that principal's.
func TestTokensTravel(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	certFile, keyFile, pool := selfSigned(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	const alice, mallory = "alice-token-of-sixteen-chars", "mallory-token-of-sixteen-chars"
	os.WriteFile(tokens, []byte(alice+"\n"+mallory+"\n"), 0o600)
	var urls []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen := ln.Addr().String()
		ln.Close()
		startServeWith(t, t.TempDir(), nil, "--cluster", dsn, "--listen", listen, "--tls-cert", certFile, "--tls-key", keyFile,
			"--token-file", tokens, "--cluster-ca", certFile)
		urls = append(urls, "https://"+listen)
	}
	dial := func(url, token string) *client.Client {
		c, err := client.Dial(url, client.Options{Token: token, DialTLS: (&tls.Dialer{Config: &tls.Config{RootCAs: pool}}).DialContext})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx := context.Background()
	aliceA, aliceB, malloryB := dial(urls[0], alice), dial(urls[1], alice), dial(urls[1], mallory)
	sb, err := aliceA.Create(ctx, client.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aliceA.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"sh", "-c", "echo alice > f"}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := aliceA.Suspend(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	var ae *client.APIError
	if _, err := malloryB.Resume(ctx, sb.ID); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("another token resumed alice's sandbox: %v", err)
	}
	if _, err := aliceB.ResumeHere(ctx, sb.ID); err != nil {
		t.Fatalf("alice through B: %v", err)
	}
	if l, err := aliceB.List(ctx); err != nil || len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("alice's sandboxes on B: %+v %v", l, err)
	}
	var out strings.Builder
	if _, err := aliceA.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"cat", "f"}}, &out, io.Discard); err != nil || out.String() != "alice\n" {
		t.Fatalf("alice through A, forwarded to B: %q %v", out.String(), err)
	}
	if _, err := malloryB.Exec(ctx, sb.ID, client.ExecSpec{Args: []string{"cat", "f"}}, io.Discard, io.Discard); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("mallory execs in alice's sandbox: %v", err)
	}
}

// TestJCPBudgetSharedByHosts: the hosts of a cluster keep one JCP budget
// ledger (in its PostgreSQL): a delegation good for one run, used
// through host A, is refused through host B (runs-exhausted), and the
// ledger verified through B is the one both hosts appended to.
func TestJCPBudgetSharedByHosts(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b := t.TempDir(), t.TempDir()
	hello, alice, _ := jcpSetup(t, a)
	once := filepath.Join(t.TempDir(), "once.jcp")
	if out, e, code := sandbox(t, a, "jcp", "delegate", alice, "--from", "alice", "--to", "bob", "--ceiling", "cpu:3J", "--caveat", "runs=1", "-o", once); code != 0 {
		t.Fatalf("delegate: %d %s %s", code, out, e)
	}
	// Both hosts trust the same roots (docs/cluster.md).
	roots, err := os.ReadFile(filepath.Join(a, "jcp", "roots"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(b, "jcp"), 0o700)
	if err := os.WriteFile(filepath.Join(b, "jcp", "roots"), roots, 0o600); err != nil {
		t.Fatal(err)
	}
	startServeWith(t, a, nil, "--cluster", dsn)
	startServeWith(t, b, nil, "--cluster", dsn)
	// The principals' keys are in A's home; the service is A's, then B's.
	via := func(host string, args ...string) (string, string, int) {
		t.Helper()
		cmd := cliCmd(t, a, []string{"SANDBOX_HOST=" + filepath.Join(host, "serve.sock")}, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	run := []string{"run", "-q", "--jcp", once, "--as", "bob", "--grant", "cpu:1J", "--", hello}
	if out, e, code := via(a, run...); code != 0 || !strings.Contains(out, "hello") {
		t.Fatalf("the one run, through A: %d %q %s", code, out, e)
	}
	if out, e, code := via(b, run...); code != 125 || !strings.Contains(e, "runs-exhausted") {
		t.Fatalf("a second run, through B: exit %d (want 125, runs-exhausted): %q %s", code, out, e)
	}
	out, e, code := via(b, "jcp", "ledger", "verify")
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("jcp ledger verify through B: %d %s %s", code, out, e)
	}
	if out, e, code := via(b, "jcp", "ledger", "--json"); code != 0 || !strings.Contains(out, `"runs": 1`) {
		t.Fatalf("jcp ledger through B: %d %s %s", code, out, e)
	}
}

// TestPoolClaimsGoWhereSandboxesAreReady: B keeps a warm pool "dev", A
// none; a claim of "dev" through A is sent to B (the pool B reported to
// the cluster, in a row it signed) and hands the caller the sandbox B
// kept ready: its record there opens with the pool's making and has the
// claim; A holds nothing, and the sandbox answers through A. With
// --here, A claims from its own pools alone: it has none.
func TestPoolClaimsGoWhereSandboxesAreReady(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	a, b := t.TempDir(), t.TempDir()
	startServeWith(t, a, nil, "--cluster", dsn)
	startServeWith(t, b, nil, "--cluster", dsn, "--pool", "dev:size=1")
	unix := func(home string) *http.Client {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(home, client.SocketName))
		}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	for i := 0; ; i++ { // B's pool made: a bound, not a measure
		var pools []struct{ Ready int }
		resp, err := unix(b).Get("http://sandbox/v1/pools")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&pools)
		resp.Body.Close()
		if len(pools) == 1 && pools[0].Ready == 1 {
			break
		}
		if i == 1200 {
			t.Fatalf("B's pool never became ready: %+v", pools)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, e, code := runCLI(t, a, "", "create", "--pool", "dev")
	if code != 0 {
		t.Fatalf("claim through A: %d %s", code, e)
	}
	id := strings.TrimSpace(out)
	if ids := psIDs(t, b); !slices.Contains(ids, id) {
		t.Fatalf("B holds %v, not the claimed %s", ids, id)
	}
	if ids := psIDs(t, a); len(ids) != 0 {
		t.Fatalf("A holds %v", ids)
	}
	rec, err := os.ReadFile(filepath.Join(b, "records", id+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rec), `"kind":"claimed"`) {
		t.Fatalf("B's record of the claimed sandbox has no claim:\n%s", rec)
	}
	if _, e, code := runCLI(t, a, "", "exec", "-q", id, "--", "true"); code != 0 {
		t.Fatalf("exec through A: %d %s", code, e)
	}
	resp, err := unix(a).Post("http://sandbox/v1/pools/dev/claim?here=true", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a claim through A with here=true: %s, want 404 (A keeps no pool)", resp.Status)
	}
}

// TestClusterCollectsByItself: hosts serving with --cluster-gc-every
// collect the cluster's blob store themselves: the bundle a later
// suspension replaced goes, without anyone running 'cluster gc', and
// the sandbox still moves. The flag wants --cluster.
func TestClusterCollectsByItself(t *testing.T) {
	t.Parallel()
	_, dsn := clusterDB(t)
	if _, e, code := runCLI(t, t.TempDir(), "", "serve", "--cluster-gc-every", "1s"); code != 2 || !strings.Contains(e, "--cluster-gc-every") {
		t.Fatalf("--cluster-gc-every without --cluster: %d %s", code, e)
	}
	dir := t.TempDir()
	a, b, _ := twoHosts(t, dsn, nil, "--blobs", "file://"+dir, "--cluster-gc-every", "300ms")
	id := createWriting(t, a, "kept")
	var first []string // what the first suspension stored: all of it named until the second
	for i, step := range []string{"suspend", "resume", "suspend"} {
		if _, e, code := runCLI(t, a, "", step, id); code != 0 {
			t.Fatalf("%s on A: %d %s", step, code, e)
		}
		if i == 0 {
			first, _ = filepath.Glob(filepath.Join(dir, "blobs", "*"))
		}
	}
	// The first suspension's bundle, which the second replaced, goes.
	// (A bound for a hang, not a measure: collections run every 300 ms.)
	gone := func() bool {
		for _, p := range first {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(2 * time.Minute); !gone(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no collection removed the replaced bundle: all %d objects of the first suspension are there", len(first))
		}
	}
	if _, e, code := runCLI(t, b, "", "resume", id); code != 0 {
		t.Fatalf("resume through B after the hosts collected: %d %s", code, e)
	}
	if out := catF(t, b, id); out != "kept\n" {
		t.Fatalf("on B: %q", out)
	}
}
