package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/volume"
)

// Leftover is something a sandbox process made for a run and did not
// remove because it ended first (killed, crashed, out of disk).
type Leftover struct {
	Kind string // what it is: "run being written", "S1 root", "CA bundle", "probe scratch", "cgroup", "lease"
	Path string
	// Unowned is set for a leftover whose name carries no lease (made by
	// a sandbox from before leases): nothing says whether its maker
	// lives, so it is reported and never removed.
	Unowned bool
	Err     error // why it could not be removed
}

// leaseName matches the lease part of a name made by state.Lease.Name.
var leaseName = regexp.MustCompile(`-([0-9a-f]{16})-[0-9]+(-host)?$`)

// Collect is the collection a run does before it starts: GC, but only
// when some sandbox process has ended holding a lease; otherwise nothing
// is scanned (runs/ and the temporary directory can be large). What a
// collector that failed midway left (named by a lease whose file is
// gone) waits for 'sandbox gc', which always looks everywhere.
func (h *Manager) Collect() ([]Leftover, error) {
	dead, err := h.Store.Dir.DeadLeases()
	if err != nil {
		return nil, err
	}
	for _, d := range dead {
		d.Unlock()
	}
	if len(dead) == 0 {
		return nil, nil
	}
	return h.GC(false)
}

// GC finds what ended sandbox processes left: things named by a lease
// that is no longer held (its maker ended, however), or whose lease file
// is gone. Unless dryRun, it removes them (ending any process still in a
// leftover cgroup first) and then the dead leases. Things of live leases
// are never touched; things with no lease in their name are reported as
// unowned and left alone.
func (h *Manager) GC(dryRun bool) ([]Leftover, error) {
	dead, err := h.Store.Dir.DeadLeases()
	if err != nil {
		return nil, err
	}
	deadIDs := map[string]*state.DeadLease{}
	for _, d := range dead {
		deadIDs[d.ID] = d
	}
	ended := func(id string) bool {
		if _, ok := deadIDs[id]; ok {
			return true
		}
		_, err := os.Stat(h.Store.Dir.Path("leases", id+".lock"))
		return errors.Is(err, os.ErrNotExist) // closed: its maker is done with it
	}
	var out []Leftover
	// consider judges one thing by the lease in its name. Things in the
	// state directory belong to its leases; things outside it (cgroups,
	// the temporary directory) may be another state directory's, so
	// they are judged only by a dead lease found here, never by a lease
	// file that is missing here.
	consider := func(kind, path, name string, unownedToo bool, remove func() error) {
		m := leaseName.FindStringSubmatch(name)
		if m == nil {
			if unownedToo {
				out = append(out, Leftover{Kind: kind, Path: path, Unowned: true})
			}
			return
		}
		_, deadHere := deadIDs[m[1]]
		outside := !strings.HasPrefix(path, h.Store.Dir.Root+string(filepath.Separator))
		if h.Store.Lease != nil && m[1] == h.Store.Lease.ID || !ended(m[1]) || outside && !deadHere {
			return // this process's own, a live one's, or not this state directory's
		}
		l := Leftover{Kind: kind, Path: path}
		if !dryRun {
			l.Err = remove()
		}
		out = append(out, l)
	}
	scan := func(dir, prefix, kind string, unownedToo bool) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				p := filepath.Join(dir, e.Name())
				if img, ok := strings.CutSuffix(p, ".img"); ok && prefix == "sandbox-ws-" {
					if _, err := os.Lstat(img); err == nil {
						continue // a bounded workspace's image: removed with it
					}
				}
				consider(kind, p, e.Name(), unownedToo, func() error { return removeWorkspace(p) })
			}
		}
	}
	scan(h.Store.Dir.Path("runs"), ".partial-", "run being written", true)
	scan(h.Store.Path(store.StagingDir), "batch-", "blobs a capture staged and never stored (nothing names them)", false)
	// Per-run S1 root directories: made by versions before 2026-12 (S1
	// now mounts every init's root on roots/init), so only a killed
	// process of such a version leaves one.
	scan(h.Store.Dir.Path("roots"), "run-", "S1 root", true)
	scan(h.Store.Dir.Path("roots"), "ca-", "CA bundle", true)
	// A directory S1 keeps a run's writes in when they cannot be
	// committed: removed when empty; otherwise it holds work, which is
	// never removed, only given its lasting name (NAME.kept).
	kept, _ := os.ReadDir(h.Store.Dir.Path("kept"))
	for _, e := range kept {
		if !strings.HasPrefix(e.Name(), "kept-") || strings.HasSuffix(e.Name(), ".kept") {
			continue
		}
		p := filepath.Join(h.Store.Dir.Path("kept"), e.Name())
		empty := isEmptyDir(p)
		kind := "directory for writes kept aside (empty)"
		if !empty {
			kind = "writes kept aside by a run that ended first: moved to " + p + ".kept, not removed"
		}
		consider(kind, p, e.Name(), false, func() error {
			if empty {
				return os.Remove(p)
			}
			return os.Rename(p, p+".kept")
		})
	}
	// Probe scratch lives in the system's temporary directory (a probe
	// binds it into a run, and no grant may reach the state directory);
	// only names with a lease are ever considered there.
	scan(os.TempDir(), "sandbox-s1-probe-", "probe scratch", false)
	scan(os.TempDir(), "sandbox-probe-", "probe scratch", false)
	scan(os.TempDir(), "sandbox-vm-", "VM directory (sockets, console)", false)
	scan(os.TempDir(), "sandbox-fc-", "VM directory (sockets, console)", false)
	// Forks of ended processes: their stages moved into the store where
	// their children's records name them, removed where none does.
	h.collectForks(consider)
	// Live sandboxes of ended processes: their records are made whole
	// (suspended from the workspace as it was left, or closed) before
	// any workspace is judged, so that none is removed that a record
	// still needs.
	for _, r := range h.Recover(func(lease string) bool {
		_, deadHere := deadIDs[lease]
		return deadHere || lease != "" && ended(lease) && (h.Store.Lease == nil || lease != h.Store.Lease.ID)
	}, dryRun) {
		kind := "live sandbox of an ended process: " + r.What
		if r.What == "suspended" {
			kind += " from its workspace as it was left (sandbox resume " + r.ID + ")"
		}
		if dryRun {
			kind = "live sandbox of an ended process: its record would be suspended or closed"
		}
		out = append(out, Leftover{Kind: kind, Path: h.RecordPath(r.ID), Err: r.Err})
	}
	// The host's pool, mounted again where a restart of the machine
	// left its image (this host's: another user's is none), so that what
	// ended processes left in it is judged too; a dry run mounts nothing,
	// and judges it only where it is mounted.
	if !dryRun {
		if err := volume.MountPool(volume.PoolDir()); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, volume.ErrNotSupported) {
			out = append(out, Leftover{Kind: "the host's volume pool, not mounted again: what is in it is not judged", Path: volume.PoolDir(), Err: err})
		}
	}
	for _, d := range h.volumeDirs() {
		scan(d, "sandbox-ws-", "live sandbox workspace", false)
		scan(d, "sandbox-fork-", "a fork's copy of a workspace volume", false)
	}
	scan(os.TempDir(), "sandbox-seed-", "a seed's fetched repository", false)
	scan(os.TempDir(), "sandbox-collect-", "a bundle a collection of the cluster's blob store staged", false)
	// A copy of a suspended sandbox's workspace that an earlier version
	// kept beside its snapshot: the snapshot is the workspace's copy.
	for _, id := range h.recordIDs() {
		kept := h.parkedDir(id)
		if _, err := os.Stat(kept); err != nil {
			continue
		}
		l := Leftover{Kind: "workspace copy kept beside a snapshot by an earlier version", Path: kept}
		if !dryRun {
			l.Err = os.RemoveAll(kept)
		}
		out = append(out, l)
	}
	if h.Cgroups != nil {
		for _, name := range h.Cgroups.Names() {
			if !strings.HasPrefix(name, "partial-") {
				continue
			}
			g := h.Cgroups.Open(name)
			path := g.V2
			for _, d := range g.V1 {
				if path == "" {
					path = d
				}
			}
			consider("cgroup", path, name, true, func() error {
				if err := g.Kill(2 * time.Second); err != nil {
					return err
				}
				return g.Remove()
			})
		}
	}
	for _, d := range dead {
		l := Leftover{Kind: "lease", Path: h.Store.Dir.Path("leases", d.ID+".lock")}
		if dryRun {
			d.Unlock()
		} else if failed(out, d.ID) {
			l.Err = fmt.Errorf("kept while what it names could not be removed")
			d.Unlock()
		} else {
			l.Err = d.Release()
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Unowned != out[j].Unowned && !out[i].Unowned })
	return out, nil
}

// failed reports whether removing anything of lease id failed.
func failed(ls []Leftover, id string) bool {
	for _, l := range ls {
		if l.Err != nil && strings.Contains(filepath.Base(l.Path), "-"+id+"-") {
			return true
		}
	}
	return false
}

func isEmptyDir(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}
