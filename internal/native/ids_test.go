//go:build linux

package native

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/errs"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// testIDs is a range of count ids from IDBase with its leases in a
// directory of the test's, the host's processes and etc as given.
func testIDs(t *testing.T, dir string, count uint32, etc string) *hostIDs {
	t.Helper()
	if etc == "" {
		etc = t.TempDir()
	}
	return &hostIDs{base: IDBase, count: count, dir: dir, etc: etc, proc: "/proc"}
}

// TestHostIDLeasesAreExclusive: an id is leased to one holder at a time,
// whichever range value (two services) asks; an id the host's users,
// groups or subordinate ranges name is never leased; a released id is
// free again; a full range says so.
func TestHostIDLeasesAreExclusive(t *testing.T) {
	dir, etc := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(etc, "passwd"), []byte(fmt.Sprintf("root:x:0:0::/root:/bin/sh\nsvc:x:%d:100::/:/bin/false\n", IDBase+1)), 0o644)
	os.WriteFile(filepath.Join(etc, "subgid"), []byte(fmt.Sprintf("alice:%d:1\n", IDBase+3)), 0o644)
	one, two := testIDs(t, dir, 5, etc), testIDs(t, dir, 5, etc)
	var leases []*idLease
	held := map[int]bool{}
	for i := range 3 {
		r := one
		if i%2 == 1 {
			r = two
		}
		l, err := r.lease()
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		if held[l.ID] || l.ID == IDBase+1 || l.ID == IDBase+3 || l.ID < IDBase || l.ID >= IDBase+5 {
			t.Fatalf("lease %d got %d (held: %v)", i, l.ID, held)
		}
		held[l.ID] = true
		leases = append(leases, l)
	}
	for _, r := range []*hostIDs{one, two} {
		if l, err := r.lease(); err == nil || !strings.Contains(err.Error(), "no free host id") || errs.Of(err) != errs.Limit {
			t.Fatalf("a fourth lease of three free ids: %v %v", l, err)
		}
	}
	leases[1].Release()
	leases[1].Release() // twice is once
	l, err := two.lease()
	if err != nil || l.ID != leases[1].ID {
		t.Fatalf("after a release: %v %v, want %d again", l, err, leases[1].ID)
	}
	l.Release()
	for _, l := range leases {
		l.Release()
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("released leases left %d files", len(ents))
	}
}

// TestNamedIDs reads the ids passwd, group and the subordinate ranges
// name; lines it cannot read name nothing.
func TestNamedIDs(t *testing.T) {
	tests := []struct {
		file, text string
		want       []idSpan
	}{
		{"passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/bin/false\n", []idSpan{{0, 0}, {0, 0}, {65534, 65534}, {65534, 65534}}},
		{"passwd", "broken\n:x:y:z\n\n", nil},
		{"group", "wheel:x:10:alice\nodd:x:-1:\n", []idSpan{{10, 10}}},
		{"subuid", "alice:100000:65536\nbob:1879048192:0\nzed:5\n", []idSpan{{100000, 165535}}},
		{"subgid", "x:4294967295:1\n", []idSpan{{4294967295, 4294967295}}},
	}
	for _, tc := range tests {
		got := namedIDs(tc.file, []byte(tc.text))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s %q: %v, want %v", tc.file, tc.text, got, tc.want)
		}
	}
}

// TestHostIDHolderHelper is the other process of
// TestHostIDLeaseOutlivesNoHolder: it leases the one id of the range in
// $SANDBOX_TEST_ID_DIR, says which, and holds it until its stdin ends.
func TestHostIDHolderHelper(t *testing.T) {
	dir := os.Getenv("SANDBOX_TEST_ID_DIR")
	if dir == "" {
		t.Skip("run by TestHostIDLeaseOutlivesNoHolder")
	}
	l, err := (&hostIDs{base: IDBase, count: 1, dir: dir, etc: filepath.Join(dir, "no-etc"), proc: "/proc"}).lease()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("leased", l.ID)
	io.Copy(io.Discard, os.Stdin)
	l.Release()
}

// TestHostIDLeaseOutlivesNoHolder: another process's lease is respected
// while it lives; when it dies without releasing (killed), its id is
// leased again only once no process on the host holds that id.
func TestHostIDLeaseOutlivesNoHolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process as the leased id needs root")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostIDHolderHelper$")
	cmd.Env = append(os.Environ(), "SANDBOX_TEST_ID_DIR="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	var id int
	if _, err := fmt.Sscanf(line, "leased %d", &id); err != nil || id != IDBase {
		t.Fatalf("the holder: %q", line)
	}
	r := testIDs(t, dir, 1, "")
	if l, err := r.lease(); err == nil {
		t.Fatalf("leased %d while another process holds it", l.ID)
	}
	// A process still runs as the id when its holder dies.
	user := exec.Command("/bin/sleep", "600")
	user.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(id), Gid: uint32(id), Groups: []uint32{}}}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	defer user.Process.Kill()
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(id))); err != nil {
		t.Fatalf("the killed holder's lease file: %v", err)
	}
	if l, err := r.lease(); err == nil {
		t.Fatalf("leased %d while a process (pid %d) runs as it", l.ID, user.Process.Pid)
	}
	user.Process.Kill()
	user.Wait()
	l, err := r.lease()
	if err != nil || l.ID != id {
		t.Fatalf("once nothing runs as it: %v %v", l, err)
	}
	l.Release()
}

// TestHostIDSweep: the first lease of a process removes the leases
// killed holders left, but for those whose ids a process still holds,
// and leaves live ones alone.
func TestHostIDSweep(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a process as the leased id needs root")
	}
	dir := t.TempDir()
	live, err := testIDs(t, dir, 4, "").lease()
	if err != nil {
		t.Fatal(err)
	}
	defer live.Release()
	var stale []int // what killed holders left
	for id := IDBase; id < IDBase+4; id++ {
		if id != live.ID {
			os.WriteFile(filepath.Join(dir, strconv.Itoa(id)), []byte("pid 1\n"), 0o600)
			stale = append(stale, id)
		}
	}
	user := exec.Command("/bin/sleep", "600")
	user.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(stale[0]), Gid: uint32(stale[0]), Groups: []uint32{}}}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { user.Process.Kill(); user.Wait() }()
	l, err := testIDs(t, dir, 4, "").lease() // a new process's first
	if err != nil || (l.ID != stale[1] && l.ID != stale[2]) {
		t.Fatalf("a lease: %v %v, want %d or %d", l, err, stale[1], stale[2])
	}
	defer l.Release()
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{strconv.Itoa(live.ID), strconv.Itoa(stale[0]), strconv.Itoa(l.ID)}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("lease files left: %v, want %v (the live ones and the one a process still runs as)", left, want)
	}
}

// TestConcurrentSandboxesHaveDistinctIDs: live sandboxes of two
// executors with state directories of their own (two services on one
// host) and one-shot runs beside them all hold different host ids.
func TestConcurrentSandboxesHaveDistinctIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root, S1 guests run as a host id of their own")
	}
	second, err := New(Config{StateDir: t.TempDir(), Memory: 256 << 20, Pids: 64, Self: testExecutor(t).self()})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	held := map[int]string{}
	for i := range 6 {
		e := testExecutor(t)
		if i%2 == 1 {
			e = second
		}
		s, err := e.Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		leasedID(t, "a live sandbox", s.HostID())
		if w, ok := held[s.HostID()]; ok {
			t.Fatalf("sandbox %d got host id %d, held by %s", i, s.HostID(), w)
		}
		held[s.HostID()] = fmt.Sprintf("sandbox %d", i)
		// Every exec of it runs as its id.
		var out strings.Builder
		res, err := s.Run(context.Background(), &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: "/bin/cat", Args: []string{"cat", "/proc/self/uid_map"}},
			Stdout: &out, Stderr: io.Discard, Deadline: time.Minute})
		if err != nil || !strings.HasPrefix(strings.Join(strings.Fields(out.String()), " "), fmt.Sprintf("65534 %d 1", s.HostID())) {
			t.Fatalf("an exec of sandbox %d: %v %+v %q", i, err, res, out.String())
		}
	}
	for i := range 4 {
		r := runNative(t, nil, time.Minute, "/bin/cat", "/proc/self/uid_map")
		f := strings.Fields(r.stdout)
		if r.err != nil || len(f) != 3 {
			t.Fatalf("%v %q", r.err, r.stdout)
		}
		id, _ := strconv.Atoi(f[1])
		if w, ok := held[id]; ok {
			t.Fatalf("run %d got host id %d, held by %s", i, id, w)
		}
	}
}

// TestHostIdentityCheck: the probe's host-side check fails when a process
// outside the run holds the run's id, and holds otherwise.
func TestHostIdentityCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as root, S1 guests run as a host id of their own")
	}
	s, err := testExecutor(t).Open(context.Background(), grant.Set{}, unit.Limits{}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	argv := []string{"sleep", fmt.Sprintf("3600.%d", time.Now().UnixNano()%1e9)}
	if _, err := s.Run(context.Background(), &executor.Job{Unit: unit.Unit{Kind: tier.Native, Entry: "/bin/sh",
		Args: []string{"sh", "-c", strings.Join(argv, " ") + " </dev/null >/dev/null 2>&1 &"}}, Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute}); err != nil {
		t.Fatal(err)
	}
	findProc(t, argv...)
	if ok, why := hostIdentity("/proc", s.p.cmd.Process.Pid, s.HostID()); !ok {
		t.Fatalf("a live sandbox alone with its id: %s", why)
	}
	user := exec.Command("/bin/sleep", "600")
	user.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: uint32(s.HostID()), Groups: []uint32{}}}
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { user.Process.Kill(); user.Wait() }()
	ok, why := hostIdentity("/proc", s.p.cmd.Process.Pid, s.HostID())
	if ok || !strings.Contains(why, fmt.Sprintf("pid %d", user.Process.Pid)) {
		t.Errorf("with a host process in the sandbox's group: %v %s", ok, why)
	}
	if ok, why := hostIdentity("/proc", s.p.cmd.Process.Pid, s.HostID()+1); ok {
		t.Errorf("an id the sandbox does not hold: %s", why)
	}
}

// TestHostIDLeasesPassOverNamedRanges: a subordinate range that covers
// most of the ids is passed over, however wide, wherever the search
// starts; what is left is leased, and no more.
func TestHostIDLeasesPassOverNamedRanges(t *testing.T) {
	dir, etc := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(etc, "subuid"), []byte(fmt.Sprintf("alice:%d:%d\n", IDBase, 2*maxIDTries)), 0o644)
	r := testIDs(t, dir, 2*maxIDTries+5, etc)
	seen := map[int]bool{}
	for i := range 5 {
		l, err := r.lease()
		if err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
		defer l.Release()
		if seen[l.ID] || l.ID < IDBase+2*maxIDTries {
			t.Fatalf("lease %d got %d", i, l.ID)
		}
		seen[l.ID] = true
	}
	if l, err := r.lease(); err == nil {
		t.Fatalf("a sixth lease of five free ids: %d", l.ID)
	}
}
