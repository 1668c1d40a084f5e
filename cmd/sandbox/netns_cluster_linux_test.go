package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/store/pgstore/pgtest"
	"github.com/opensubstrate/sandbox/internal/store/s3blobs/s3test"
)

// netTopology is a test network of its own: a bridge in this network
// namespace holding the address PostgreSQL and the S3 server listen on
// (.1), and a network namespace per host joined to it by a veth pair
// (.11, .12, …). Cut cuts a host's link; Heal brings it back.
type netTopology struct {
	t      *testing.T
	bridge string
	prefix string            // "10.77.N."
	hosts  map[string]string // name → its namespace
	links  map[string]string // name → its veth end on the bridge
}

func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// netnsProbe says why this machine cannot make network namespaces ("":
// it can).
func netnsProbe() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	for _, p := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(p); err != nil {
			return "no " + p + " (iproute2, util-linux)"
		}
	}
	ns := fmt.Sprintf("sbprobe-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add: %v: %s", err, out)
	}
	exec.Command("ip", "netns", "del", ns).Run()
	return ""
}

func newTopology(t *testing.T, names ...string) *netTopology {
	t.Helper()
	if why := netnsProbe(); why != "" {
		t.Skip(why)
	}
	id := os.Getpid() % 10000
	n := &netTopology{t: t, bridge: fmt.Sprintf("sbbr%d", id), prefix: fmt.Sprintf("10.77.%d.", 20+os.Getpid()%200),
		hosts: map[string]string{}, links: map[string]string{}}
	t.Cleanup(func() {
		for _, ns := range n.hosts {
			exec.Command("ip", "netns", "del", ns).Run()
		}
		exec.Command("ip", "link", "del", n.bridge).Run()
	})
	ipRun(t, "link", "add", n.bridge, "type", "bridge")
	ipRun(t, "addr", "add", n.prefix+"1/24", "dev", n.bridge)
	ipRun(t, "link", "set", n.bridge, "up")
	for i, name := range names {
		ns := fmt.Sprintf("sbc-%d-%s", id, name)
		vh, vp := fmt.Sprintf("sbv%d%s", id, name), fmt.Sprintf("sbp%d%s", id, name)
		n.hosts[name], n.links[name] = ns, vh
		ipRun(t, "netns", "add", ns)
		ipRun(t, "link", "add", vh, "type", "veth", "peer", "name", vp)
		ipRun(t, "link", "set", vp, "netns", ns)
		ipRun(t, "link", "set", vh, "master", n.bridge, "up")
		ipRun(t, "-n", ns, "addr", "add", fmt.Sprintf("%s%d/24", n.prefix, 11+i), "dev", vp)
		ipRun(t, "-n", ns, "link", "set", vp, "up")
		ipRun(t, "-n", ns, "link", "set", "lo", "up")
	}
	return n
}

// addr is host name's address (its index among the names, from .11).
func (n *netTopology) addr(i int) string { return fmt.Sprintf("%s%d", n.prefix, 11+i) }

func (n *netTopology) Cut(name string)  { ipRun(n.t, "link", "set", n.links[name], "down") }
func (n *netTopology) Heal(name string) { ipRun(n.t, "link", "set", n.links[name], "up") }

// serveIn starts `sandbox serve` of home inside host name's network
// namespace: nsenter enters that alone (ip netns exec would also mount a
// sysfs of its own there, without the cgroup hierarchy S1 places runs
// in).
func (n *netTopology) serveIn(name, home string, env []string, args ...string) *exec.Cmd {
	n.t.Helper()
	cmd := cliCmd(n.t, home, env, append([]string{"serve"}, args...)...)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		n.t.Fatal(err)
	}
	cmd.Args = append([]string{"nsenter", "--net=/run/netns/" + n.hosts[name], "--"}, cmd.Args...)
	cmd.Path = nsenter
	return startServeCmd(n.t, home, cmd)
}

// within polls f every 100 ms until it holds or bound passes: a bound on
// how long the cluster may take (heartbeats, dead-after), not a measure.
func within(t *testing.T, bound time.Duration, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(bound); !f(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterOfThreeHostsInNamespaces: three hosts, each a `sandbox
// serve` in a network namespace of its own, one PostgreSQL and one S3
// server on a test network, hosts forwarding to each other over TLS. A
// sandbox is made through A, suspended, resumed through B (where it
// lands), driven there; B is cut off the network: once it is silent for
// the dead-after the sandbox comes back through A from its last
// suspension, and B, healed, gives it up and acts on it no more (what it
// is asked, it forwards to A). A host killed (SIGKILL) in the middle of
// an exec loses its sandbox to another, from its last suspension.
// PostgreSQL is restarted in the middle of a fleet across the hosts: the
// fleet ends whole. Every record verifies under the hosts' keys.
func TestClusterOfThreeHostsInNamespaces(t *testing.T) {
	n := newTopology(t, "a", "b", "c")
	pg, err := pgtest.StartOn(n.prefix+"1", n.prefix+"0/24")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	dsn := strings.Replace(pg.NewDatabase(t), "host="+pg.Dir, "host="+n.prefix+"1", 1) + " connect_timeout=5"
	s3 := s3test.StartOn(t, n.prefix+"1")
	blobs := s3.URL(s3.Bucket())
	certFile, keyFile, _ := selfSigned(t, n.addr(0), n.addr(1), n.addr(2))
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("a-token-of-sixteen-chars-or-more\n"), 0o600)
	env := append([]string{"SANDBOX_CLUSTER_DEAD_AFTER=3s"}, s3.Env()...)
	homes := map[string]string{"a": t.TempDir(), "b": t.TempDir(), "c": t.TempDir()}
	procs := map[string]*exec.Cmd{}
	for i, h := range []string{"a", "b", "c"} {
		procs[h] = n.serveIn(h, homes[h], env, "--cluster", dsn, "--blobs", blobs, "--cluster-ca", certFile,
			"--listen", n.addr(i)+":7443", "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", tokens)
	}
	a, b, c := homes["a"], homes["b"], homes["c"]
	trustAll := []string{"--trust-host", "--trust", filepath.Join(b, "host.pub"), "--trust", filepath.Join(c, "host.pub"), "--trust", filepath.Join(a, "host.pub")}

	// Made through A, suspended, and resumed on B (--here: the
	// placement's choice is TestSandboxesArePlaced's, not this test's,
	// whose hosts heartbeat every second and a loaded machine may make
	// one late).
	x := createWriting(t, a, "suspended on A")
	if _, e, code := runCLI(t, a, "", "suspend", x); code != 0 {
		t.Fatalf("suspend on A: %d %s", code, e)
	}
	if _, e, code := runCLI(t, b, "", "resume", "--here", x); code != 0 {
		t.Fatalf("resume through B: %d %s", code, e)
	}
	if ids := psIDs(t, b); len(ids) != 1 || ids[0] != x {
		t.Fatalf("B holds %v, want %s", ids, x)
	}
	if _, e, code := runCLI(t, c, "", "exec", "-q", x, "--", "sh", "-c", "echo on B after the resume > g"); code != 0 {
		t.Fatalf("exec through C, forwarded to B: %d %s", code, e)
	}

	// B is cut off: its sandbox comes back through A from its last
	// suspension, once B has been silent for the dead-after.
	n.Cut("b")
	within(t, 90*time.Second, "the resume through A of the sandbox of a silent B", func() bool {
		_, _, code := runCLI(t, a, "", "resume", "--here", x)
		return code == 0
	})
	if out := catF(t, a, x); out != "suspended on A\n" {
		t.Fatalf("on A after B was cut off: %q", out)
	}
	if out, _, _ := runCLI(t, a, "", "exec", "-q", x, "--", "sh", "-c", "cat g 2>&1 || echo none"); !strings.Contains(out, "none") && !strings.Contains(out, "No such file") {
		t.Fatalf("what B wrote after the suspension came back: %q", out)
	}
	n.Heal("b")
	within(t, 90*time.Second, "B giving up the sandbox A holds", func() bool { return len(psIDs(t, b)) == 0 })
	if _, e, code := runCLI(t, a, "", "exec", "-q", x, "--", "sh", "-c", "echo on A > h"); code != 0 {
		t.Fatalf("exec on A: %d %s", code, e)
	}
	if out, _, code := runCLI(t, b, "", "exec", "-q", x, "--", "cat", "h"); code != 0 || out != "on A\n" {
		t.Fatalf("exec through B, healed (forwarded to A): %d %q", code, out)
	}
	if _, e, code := runCLI(t, c, "", "close", x); code != 0 {
		t.Fatalf("close through C: %d %s", code, e)
	}
	if out, e, code := runCLI(t, a, "", append(append([]string{"record", "verify", "--runs"}, trustAll...), x)...); code != 0 {
		t.Fatalf("the record on A: %d %s %s", code, out, e)
	}

	// SIGKILL of the host running a sandbox, mid-exec. Made through C,
	// suspended and resumed on C (--here: wherever the placement put
	// it, it is C's from there).
	y := createWriting(t, c, "before the last suspension")
	if _, e, code := runCLI(t, c, "", "suspend", y); code != 0 {
		t.Fatalf("suspend through C: %d %s", code, e)
	}
	if _, e, code := runCLI(t, c, "", "resume", "--here", y); code != 0 {
		t.Fatalf("resume on C: %d %s", code, e)
	}
	if ids := psIDs(t, c); len(ids) != 1 || ids[0] != y {
		t.Fatalf("C holds %v, want %s", ids, y)
	}
	runCLI(t, c, "", "exec", "-q", y, "--", "sh", "-c", "echo lost > f")
	long := cliCmd(t, c, nil, "exec", "-q", y, "--", "sleep", "60")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the exec under way (whether it is, the kill ends it)
	procs["c"].Process.Signal(syscall.SIGKILL)
	procs["c"].Wait()
	long.Wait()
	within(t, 90*time.Second, "the resume through A of the sandbox of a killed C", func() bool {
		_, _, code := runCLI(t, a, "", "resume", "--here", y)
		return code == 0
	})
	if out := catF(t, a, y); out != "before the last suspension\n" {
		t.Fatalf("on A after C was killed: %q", out)
	}

	// PostgreSQL restarted in the middle of a fleet across A and B.
	in := filepath.Join(t.TempDir(), "inputs")
	os.WriteFile(in, []byte("1\n2\n3\n4\n5\n6\n7\n8\n"), 0o600)
	before := runsIn(a) + runsIn(b)
	done := make(chan string, 1)
	go func() {
		out, e, code := runCLI(t, a, "", "fleet", "run", "--workers", "4", "--inputs", in, "--", "/bin/sh", "-c", "sleep 1; echo $0")
		done <- fmt.Sprintf("%d %s %s", code, out, e)
	}()
	within(t, 90*time.Second, "the fleet's first item run", func() bool { return runsIn(a)+runsIn(b) > before })
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !strings.HasPrefix(r, "0 ") || !strings.Contains(r, "8 items (0 failed)") {
		t.Fatalf("the fleet across a restart of PostgreSQL: %s", r)
	}
}
