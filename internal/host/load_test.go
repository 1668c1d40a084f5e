package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/tier"
)

// residue is what a long-lived host process holds, and leaves on the
// machine, that runs could leak.
type residue struct {
	fds         int
	descendants []string
	cgroups     int // this host's (the warm init's, between runs)
	mounts      int
	temps       []string // the lease's names in the temporary directory
	roots       int      // entries of roots/ in the state directory (the warm init's)
	partial     []string // runs/.partial-*
}

// launcherName says a process's "pid (comm)" is a launcher's: named
// sandbox-launch, or still the number of the descriptor it was executed
// from.
func launcherName(stat string) bool {
	comm := stat[strings.IndexByte(stat, '(')+1 : len(stat)-1]
	if comm == "sandbox-launch" {
		return true
	}
	_, err := strconv.Atoi(comm)
	return err == nil
}

func descendantsOf(pid int) []string {
	children := map[int][]int{}
	cmd := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+2:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
		cmd[p] = string(b[:bytes.LastIndexByte(b, ')')+1])
	}
	var out []string
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			// By name: the warm init waiting for the next run is a new
			// process after every run. The launcher it starts ahead for
			// its run (once its root is built) is part of it; until it
			// names itself, just after its exec of /proc/self/fd/N, its
			// name is N.
			if launcherName(cmd[c]) && len(children[c]) == 0 && p != pid {
				continue
			}
			out = append(out, cmd[c][strings.IndexByte(cmd[c], ' ')+1:])
			walk(c)
		}
	}
	walk(pid)
	sort.Strings(out)
	return out
}

func residueOf(h *Host, leaseID string) residue {
	var r residue
	fds, _ := os.ReadDir("/proc/self/fd")
	r.fds = len(fds)
	r.descendants = descendantsOf(os.Getpid())
	if h.Cgroups != nil {
		// This host's (other tests' hosts share the hierarchy).
		for _, n := range h.Cgroups.Names() {
			if strings.Contains(n, leaseID) {
				r.cgroups++
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	// Ours only: tests of other packages mount and unmount beside this one.
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, leaseID) || strings.Contains(l, h.Store.Root()) {
			r.mounts++
		}
	}
	tmp, _ := os.ReadDir(os.TempDir())
	for _, e := range tmp {
		if strings.Contains(e.Name(), leaseID) {
			r.temps = append(r.temps, e.Name())
		}
	}
	// roots/init is where every S1 init mounts its root, each in its own
	// mount namespace: a fixture of the state directory, made once.
	roots, _ := os.ReadDir(h.Store.Dir.Path("roots"))
	for _, e := range roots {
		if e.Name() != "init" {
			r.roots++
		}
	}
	runs, _ := os.ReadDir(h.Store.Dir.Path("runs"))
	for _, e := range runs {
		if strings.HasPrefix(e.Name(), ".partial") {
			r.partial = append(r.partial, e.Name())
		}
	}
	return r
}

// TestLoadLeavesNothing: 200 sealed runs at S1 and 200 at S2, 20 at a
// time, in one long-lived host; then the host holds no more descriptors,
// processes, cgroups or mounts than after its first runs, and the state
// and temporary directories hold nothing of them but sealed runs.
func TestLoadLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	h := newHost(t)
	lease, err := h.Store.Dir.Lease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Close()
	h.Store.Lease = lease
	leaseID := strings.TrimSuffix(strings.TrimPrefix(lease.Name("x"), "x-"), "-1")
	s1 := os.Geteuid() == 0
	var ex *native.Executor
	if s1 {
		ex = addS1(t, h, lease.Name)
	} else {
		t.Log("not root: S2 runs only (S1 runs in this test need cgroups)")
	}
	hello := image(t, "hello")
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	one := func(i int) error {
		var out bytes.Buffer
		req := Request{Kind: tier.Wasm, Image: hello, Entry: "hello", Args: []string{"hello"}, Grants: grants(t), Stdout: &out}
		want := "hello"
		if i%2 == 1 {
			if !s1 {
				return nil
			}
			want = fmt.Sprintf("run %d", i)
			req = Request{Kind: tier.Native, Image: sh, Entry: "/bin/sh", Args: []string{"sh", "-c", "echo run " + strconv.Itoa(i)},
				Env: map[string]string{"PATH": "/usr/bin:/bin"}, Grants: grants(t), Stdout: &out, Deadline: time.Minute}
		}
		r, err := h.Run(context.Background(), req)
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		if r.Result.Outcome.Status != "exited" || !strings.Contains(out.String(), want) {
			return fmt.Errorf("run %d: %+v, stdout %q", i, r.Result.Outcome, out.String())
		}
		return nil
	}
	// The first runs open what a host keeps (the compile cache, the
	// warm init, the runtime's poller): the baseline is taken after them.
	for i := 0; i < 2; i++ {
		if err := one(i); err != nil {
			t.Fatal(err)
		}
	}
	before := residueOf(h, leaseID)

	const n, parallel = 400, 20
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := one(i); err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d runs failed; first: %v", len(failures), n, failures[0])
	}

	// Runs end asynchronously in small ways (a warm init being started
	// for the next run): settle, then compare.
	var after residue
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = residueOf(h, leaseID)
		if fmt.Sprint(after) == fmt.Sprint(before) || time.Now().After(deadline) {
			break
		}
	}
	if after.fds > before.fds {
		t.Errorf("descriptors: %d before, %d after", before.fds, after.fds)
	}
	if fmt.Sprint(after.descendants) != fmt.Sprint(before.descendants) {
		t.Errorf("processes: %v before, %v after", before.descendants, after.descendants)
	}
	if after.cgroups != before.cgroups {
		t.Errorf("cgroups: %v before, %v after", before.cgroups, after.cgroups)
	}
	if after.mounts != before.mounts {
		t.Errorf("mounts: %d before, %d after", before.mounts, after.mounts)
	}
	if len(after.partial) > 0 || fmt.Sprint(after.temps) != fmt.Sprint(before.temps) || after.roots != before.roots {
		t.Errorf("files: %+v before, %+v after", before, after)
	}
	// Closed, the host leaves no process, root or temporary file at all.
	if ex != nil {
		ex.Close()
	}
	h.Close()
	end := residueOf(h, leaseID)
	if len(end.descendants) > 0 || end.roots > 0 || len(end.temps) > 0 {
		t.Errorf("after Close: processes %v, roots %v, temporary files %v", end.descendants, end.roots, end.temps)
	}
	if runs, err := h.Runs(); err != nil || len(runs) != 2+n/2*map[bool]int{true: 2, false: 1}[s1] {
		t.Errorf("%d runs listed (%v)", len(runs), err)
	}
}
