package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Errors.
var (
	ErrNoCgroups          = errors.New("no cgroup hierarchy")
	ErrThreadsUnsupported = errors.New("threads cannot be placed in their own cgroup here")
)

// Hierarchy is the cgroup layout of a host.
type Hierarchy struct {
	Root string
	// V2 is the unified hierarchy's directory, "" if none.
	V2 string
	// V2Controllers lists the controllers the unified hierarchy offers.
	V2Controllers []string
	// V1 maps a v1 controller to its hierarchy's directory.
	V1 map[string]string
}

// Kind describes the layout for people: "v2", "hybrid" or "v1".
func (h *Hierarchy) Kind() string {
	switch {
	case h.V2 != "" && len(h.V1) == 0:
		return "v2"
	case h.V2 != "":
		return "hybrid"
	}
	return "v1"
}

// Detect reads the layout under root ("/sys/fs/cgroup").
func Detect(root string) (*Hierarchy, error) {
	h := &Hierarchy{Root: root, V1: map[string]string{}}
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		h.V2 = root
		h.V2Controllers = strings.Fields(string(b))
		return h, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoCgroups, root, err)
	}
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		if e.Name() == "unified" {
			if b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers")); err == nil {
				h.V2 = dir
				h.V2Controllers = strings.Fields(string(b))
			}
			continue
		}
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(real, "cgroup.procs")); err != nil {
			continue
		}
		for _, c := range strings.Split(filepath.Base(real), ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				if _, ok := h.V1[c]; !ok {
					h.V1[c] = real
				}
			}
		}
	}
	if h.V2 == "" && len(h.V1) == 0 {
		return nil, fmt.Errorf("%w under %s", ErrNoCgroups, root)
	}
	return h, nil
}

// Group is one run's control group, across hierarchies.
type Group struct {
	Name string
	V2   string            // directory in the unified hierarchy, "" if none
	V1   map[string]string // controller → directory
	// cpuFromV1 is set once a thread was placed through v1 tasks files,
	// whose CPU time v2's cpu.stat does not see.
	cpuFromV1 atomic.Bool
	// mark is what CPU read when MarkCPU was called, and from where.
	markMu sync.Mutex
	mark   time.Duration
	markOf string
	// limits and devices are what SetLimits and SetDevices last set
	// whole (nil: nothing, or a write failed): set again, the same, they
	// write nothing. A group made ahead of its run (a warm init's) is
	// given the usual ones then, off the run's path.
	limits  *Limits
	devices []Device
}

// Parent is the directory name under which groups are made.
const Parent = "sandbox"

// Create makes a group named name holding the given v1 controllers (and
// the unified hierarchy, which always exists where v2 is mounted). On pure
// v2 it enables the controllers that are available for the children of
// the sandbox parent.
func (h *Hierarchy) Create(name string, controllers ...string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad group name %q", name)
	}
	g := &Group{Name: name, V1: map[string]string{}}
	undo := func() { g.Remove() }
	if h.V2 != "" {
		parent := filepath.Join(h.V2, Parent)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if h.V2 == h.Root { // pure v2: controllers must be delegated down
			enableControllers(h.V2, parent, controllers)
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		g.V2 = dir
	}
	for _, c := range controllers {
		base, ok := h.V1[c]
		if !ok {
			continue
		}
		if _, done := g.V1[c]; done {
			continue
		}
		dir := filepath.Join(base, Parent, name)
		if err := os.MkdirAll(dir, 0o755); err != nil && !os.IsExist(err) {
			undo()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		// Controllers sharing one hierarchy share the directory.
		for c2, b2 := range h.V1 {
			if b2 == base {
				g.V1[c2] = dir
			}
		}
	}
	if g.V2 == "" && len(g.V1) == 0 {
		return nil, fmt.Errorf("%w for controllers %v", ErrNoCgroups, controllers)
	}
	return g, nil
}

// enableControllers writes +c to the subtree_control files from the root
// down to parent, for each controller the root offers; failures leave the
// controller off, which Group users see as an absent file.
func enableControllers(root, parent string, controllers []string) {
	avail, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	have := " " + string(avail) + " "
	var on []string
	for _, c := range controllers {
		if c == "cpuacct" {
			c = "cpu"
		}
		if strings.Contains(have, " "+strings.TrimSpace(c)+" ") {
			on = append(on, "+"+c)
		}
	}
	if len(on) == 0 {
		return
	}
	for _, dir := range []string{root, parent} {
		os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(on, " ")), 0o644)
	}
}

// AddProc moves a process (and, from then on, its children) into every
// hierarchy of the group.
func (g *Group) AddProc(pid int) error {
	s := strconv.Itoa(pid)
	if g.V2 != "" {
		if err := os.WriteFile(filepath.Join(g.V2, "cgroup.procs"), []byte(s), 0o644); err != nil {
			return fmt.Errorf("cgroup: place %d: %w", pid, err)
		}
	}
	for _, dir := range uniq(g.V1) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(s), 0o644); err != nil {
			return fmt.Errorf("cgroup: place %d: %w", pid, err)
		}
	}
	return nil
}

// AddThread moves one thread into the group's v1 cpuacct hierarchy and
// returns a function that moves it back where it was. It needs v1
// cpuacct; elsewhere it returns ErrThreadsUnsupported.
func (g *Group) AddThread(tid int) (restore func() error, err error) {
	dir, ok := g.V1["cpuacct"]
	if !ok {
		return nil, ErrThreadsUnsupported
	}
	orig, err := threadCgroup(tid, "cpuacct", dir)
	if err != nil {
		return nil, err
	}
	s := strconv.Itoa(tid)
	if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(s), 0o644); err != nil {
		return nil, fmt.Errorf("cgroup: place thread %d: %w", tid, err)
	}
	g.cpuFromV1.Store(true)
	return func() error {
		return os.WriteFile(filepath.Join(orig, "tasks"), []byte(s), 0o644)
	}, nil
}

// threadCgroup finds the directory of the cpuacct cgroup a thread is in
// now, from /proc/self/task/TID/cgroup, in the hierarchy that holds dir.
func threadCgroup(tid int, controller, dir string) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/cgroup", tid))
	if err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	mount := filepath.Dir(filepath.Dir(dir)) // dir is <mount>/sandbox/<name>
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return filepath.Join(mount, parts[2]), nil
			}
		}
	}
	return "", fmt.Errorf("cgroup: thread %d is in no %s cgroup", tid, controller)
}

// CPU returns the CPU time used by everything that was ever in the group
// (since MarkCPU, where it was called), and where the figure came from.
func (g *Group) CPU() (time.Duration, string, error) {
	d, src, err := g.cpu()
	if err != nil {
		return d, src, err
	}
	g.markMu.Lock()
	defer g.markMu.Unlock()
	if g.markOf == src && d >= g.mark {
		d -= g.mark
	}
	return d, src, nil
}

// MarkCPU makes CPU count from now: what the group's processes used
// before (a process made ready in it ahead of its run) is not the run's.
func (g *Group) MarkCPU() error {
	d, src, err := g.cpu()
	if err != nil {
		return err
	}
	g.markMu.Lock()
	g.mark, g.markOf = d, src
	g.markMu.Unlock()
	return nil
}

func (g *Group) cpu() (time.Duration, string, error) {
	if dir, ok := g.V1["cpuacct"]; ok && (g.cpuFromV1.Load() || g.V2 == "") {
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return 0, "", fmt.Errorf("cgroup: %w", err)
		}
		ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("cgroup: cpuacct.usage %q", b)
		}
		return time.Duration(ns), "cgroup v1 cpuacct.usage of the run's group", nil
	}
	if g.V2 != "" {
		b, err := os.ReadFile(filepath.Join(g.V2, "cpu.stat"))
		if err != nil {
			return 0, "", fmt.Errorf("cgroup: %w", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, "", fmt.Errorf("cgroup: cpu.stat usage_usec %q", v)
				}
				return time.Duration(us) * time.Microsecond, "cgroup v2 cpu.stat usage_usec of the run's group", nil
			}
		}
		return 0, "", fmt.Errorf("cgroup: %s/cpu.stat has no usage_usec", g.V2)
	}
	return 0, "", fmt.Errorf("cgroup: no CPU accounting for group %s", g.Name)
}

// Remove deletes the group's directories. It fails while processes are
// still in the group.
func (g *Group) Remove() error {
	var errs []error
	for _, dir := range uniq(g.V1) {
		if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if g.V2 != "" {
		if err := os.Remove(g.V2); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func uniq(m map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range m {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// Limits are a group's resource limits; zero means no limit.
type Limits struct {
	Memory int64   // bytes of memory (and no swap)
	Pids   int64   // processes and threads
	CPUs   float64 // CPU bandwidth in CPUs, e.g. 1.5
}

// SetLimits writes limits to every hierarchy of the group that has the
// controller: v2 memory.max, memory.swap.max, pids.max, cpu.max; v1
// memory.limit_in_bytes (and memsw), pids.max, cpu.cfs_quota_us.
func (g *Group) SetLimits(l Limits) error {
	if g.limits != nil && *g.limits == l {
		return nil
	}
	g.limits = nil
	write := func(dir, file, v string) error {
		p := filepath.Join(dir, file)
		if _, err := os.Stat(p); err != nil {
			return nil // no such controller here
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			return fmt.Errorf("cgroup: %s = %s: %w", p, v, err)
		}
		return nil
	}
	var errs []error
	if g.V2 != "" {
		if l.Memory > 0 {
			errs = append(errs, write(g.V2, "memory.max", strconv.FormatInt(l.Memory, 10)), write(g.V2, "memory.swap.max", "0"))
		}
		if l.Pids > 0 {
			errs = append(errs, write(g.V2, "pids.max", strconv.FormatInt(l.Pids, 10)))
		}
		if l.CPUs > 0 {
			errs = append(errs, write(g.V2, "cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000))))
		}
	}
	if dir, ok := g.V1["memory"]; ok && l.Memory > 0 {
		errs = append(errs, write(dir, "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)))
		errs = append(errs, write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10)))
	}
	if dir, ok := g.V1["pids"]; ok && l.Pids > 0 {
		errs = append(errs, write(dir, "pids.max", strconv.FormatInt(l.Pids, 10)))
	}
	if dir, ok := g.V1["cpu"]; ok && l.CPUs > 0 {
		errs = append(errs, write(dir, "cpu.cfs_period_us", "100000"), write(dir, "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10)))
	}
	err := errors.Join(errs...)
	if err == nil {
		g.limits = &l
	}
	return err
}

// OOMKills returns how many processes the kernel killed in the group for
// want of memory.
func (g *Group) OOMKills() int64 {
	read := func(p, key string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
		return 0
	}
	var n int64
	if g.V2 != "" {
		n += read(filepath.Join(g.V2, "memory.events"), "oom_kill")
	}
	if dir, ok := g.V1["memory"]; ok {
		n += read(filepath.Join(dir, "memory.oom_control"), "oom_kill")
	}
	return n
}

// ErrNoFreezer is returned when no hierarchy of the group can freeze it.
var ErrNoFreezer = errors.New("cgroup: no freezer for this group")

// Freeze stops every process of the group (v2 cgroup.freeze, v1
// freezer.state) and waits until the kernel says it is frozen: after it
// returns, nothing in the group runs, detached children included.
func (g *Group) Freeze() error { return g.setFrozen(true) }

// freezeWait is how long a freeze or thaw may take: a loaded machine
// (tasks in uninterruptible sleeps) takes more than a second at times.
const freezeWait = 10 * time.Second

// Thaw lets the group's processes run again.
func (g *Group) Thaw() error { return g.setFrozen(false) }

func (g *Group) setFrozen(on bool) error {
	if dir, ok := g.V1["freezer"]; ok {
		state := "THAWED"
		if on {
			state = "FROZEN"
		}
		// A task in an uninterruptible sleep (a write to disk) holds the
		// group in FREEZING; the v1 freezer retries when the state is
		// written again, so it is, until freezeWait has passed.
		deadline := time.Now().Add(freezeWait)
		for i := 0; ; i++ {
			if i%50 == 0 {
				if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0o644); err != nil {
					return fmt.Errorf("cgroup: freeze: %w", err)
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) == state {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cgroup: %s did not become %s within %s (it is %s)", dir, state, freezeWait, strings.TrimSpace(string(b)))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if g.V2 != "" {
		p := filepath.Join(g.V2, "cgroup.freeze")
		if _, err := os.Stat(p); err == nil {
			v := "0"
			if on {
				v = "1"
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return fmt.Errorf("cgroup: freeze: %w", err)
			}
			for deadline := time.Now().Add(freezeWait); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				b, _ := os.ReadFile(filepath.Join(g.V2, "cgroup.events"))
				if strings.Contains(string(b), "frozen "+v) {
					return nil
				}
			}
			return fmt.Errorf("cgroup: %s did not report frozen %s within %s", g.V2, v, freezeWait)
		}
	}
	return ErrNoFreezer
}

// Frozen reads from the kernel whether every process of the group is
// frozen: v1's freezer.state FROZEN, v2's cgroup.events "frozen 1". A
// freeze that was asked for and not reached is not frozen.
func (g *Group) Frozen() (bool, error) {
	if dir, ok := g.V1["freezer"]; ok {
		b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == "FROZEN", nil
	}
	if g.V2 != "" {
		b, err := os.ReadFile(filepath.Join(g.V2, "cgroup.events"))
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l == "frozen 1" {
				return true, nil
			}
		}
		return false, nil
	}
	return false, ErrNoFreezer
}

// dirs returns the parent directory of sandbox's groups in each
// hierarchy, once each (controllers mounted together share one).
func (h *Hierarchy) dirs() []string {
	bases := uniq(h.V1)
	if h.V2 != "" {
		bases = append(bases, h.V2)
	}
	for i, b := range bases {
		bases[i] = filepath.Join(b, Parent)
	}
	return bases
}

// Names lists the groups under sandbox's parent, in any hierarchy.
func (h *Hierarchy) Names() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range h.dirs() {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	sort.Strings(out)
	return out
}

// Open returns the group called name as it exists now, in whichever
// hierarchies have it.
func (h *Hierarchy) Open(name string) *Group {
	g := &Group{Name: name, V1: map[string]string{}}
	if h.V2 != "" {
		if d := filepath.Join(h.V2, Parent, name); isDir(d) {
			g.V2 = d
		}
	}
	for c, base := range h.V1 {
		if d := filepath.Join(base, Parent, name); isDir(d) {
			g.V1[c] = d
		}
	}
	return g
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// EmptyWait bounds how long a run that was ended waits for its group to
// empty once every process in it was sent SIGKILL: a bound, not a
// measure (a killed process leaves its group when the kernel has torn it
// down, which on a busy machine took longer than the 2 s grace a program
// is given to end by itself).
const EmptyWait = 30 * time.Second

// Kill ends every process in the group (cgroup.kill where the unified
// hierarchy has it, SIGKILL to each listed process otherwise, a frozen v1
// group thawed first) and waits up to timeout for the group to empty.
func (g *Group) Kill(timeout time.Duration) error {
	g.Thaw()
	deadline := time.Now().Add(timeout)
	for {
		if g.V2 != "" {
			os.WriteFile(filepath.Join(g.V2, "cgroup.kill"), []byte("1"), 0o644)
		}
		pids := g.procs()
		if len(pids) == 0 && !g.populated() {
			return nil
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: %d processes still in %s after %v", len(pids), g.Name, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// populated says whether the unified hierarchy still counts a process in
// the group: one killed but not yet reaped is no longer listed in
// cgroup.procs, and the group cannot be removed until it is gone.
func (g *Group) populated() bool {
	if g.V2 == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(g.V2, "cgroup.events"))
	return err == nil && bytes.Contains(b, []byte("populated 1"))
}

// procs lists the processes in the group, in any of its hierarchies.
func (g *Group) procs() []int {
	seen := map[int]bool{}
	var out []int
	dirs := uniq(g.V1)
	if g.V2 != "" {
		dirs = append(dirs, g.V2)
	}
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// TaskFiles opens, for writing, the v1 tasks file of each of the given
// controllers' hierarchies the group is in: a thread that writes "0" to
// one moves itself there (and the processes it then starts are born
// there), which is how a process is started inside a group from within
// another pid namespace. The group's CPU time is then read from v1.
// ErrThreadsUnsupported when the group has none of them (pure v2).
func (g *Group) TaskFiles(controllers ...string) ([]*os.File, error) {
	var fs []*os.File
	seen := map[string]bool{}
	for _, c := range controllers {
		dir, ok := g.V1[c]
		if !ok || seen[dir] {
			continue
		}
		seen[dir] = true
		f, err := os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			for _, f := range fs {
				f.Close()
			}
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		fs = append(fs, f)
	}
	if len(fs) == 0 {
		return nil, ErrThreadsUnsupported
	}
	g.cpuFromV1.Store(true)
	return fs, nil
}
