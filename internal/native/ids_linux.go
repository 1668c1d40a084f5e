//go:build linux

package native

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The host identities of S1 runs (docs/s1.md, "A host identity of its
// own"). When sandbox is root, the program of each run, and every exec of
// each live sandbox, runs in a user namespace whose maps hold one entry:
// the guest's user and group (nobody, 65534) to a host id that no other
// process on the host has, leased for as long as the run's processes
// live. The same number is the uid and the gid.
const (
	// IDBase is the first host id S1 leases: 0x70000000, in the block
	// systemd's UIDS-GIDS.md leaves unused (above its container ranges,
	// which end at 0x6FFFFFFF, below its foreign-image range at
	// 0x7FFE0000, and below 2^31, which some programs take as negative),
	// and far above the subordinate ranges useradd hands out (100000 up
	// to 600100000).
	IDBase = 0x70000000
	// IDCount is how many ids S1 leases from: 2^24.
	IDCount = 1 << 24
	// IDDir is the host-wide directory of leases: a file per id in use,
	// named by the id, which its holder keeps locked (flock) while the
	// run lives and removes when the run has ended. Every sandbox process
	// on the host (services and CLIs alike, whatever their state
	// directory) leases through it. It is on /run, on most hosts a tmpfs,
	// which a reboot (ending every holder) clears; where /run is on disk,
	// a file left by a reboot is a dead holder's, taken over as any other.
	IDDir = "/run/sandbox/ids"
)

// hostIDs is the range S1 leases from, and where: the host's by default
// (hostRange); tests make their own.
type hostIDs struct {
	base, count uint32
	dir         string
	// etc holds passwd, group, subuid and subgid: ids the host already
	// names are never leased. proc is the proc file system whose
	// processes' ids a lease left by a dead holder is checked against.
	etc, proc string

	mu       sync.Mutex
	reserved []idSpan
	stamp    string // of the files reserved was read from
	swept    sync.Once
}

// hostRange is the host's.
var hostRange = &hostIDs{base: IDBase, count: IDCount, dir: IDDir, etc: "/etc", proc: "/proc"}

// idSpan is the ids [from, to].
type idSpan struct{ from, to uint64 }

// idLease is one leased id: held until Release.
type idLease struct {
	ID   int
	f    *os.File
	path string
	once sync.Once
}

// Release gives the id back. Its holder calls it only once no process
// of the run is left (init has been reaped: the kernel ends every
// process of its pid namespace first). The file goes while it is still
// locked, so no one else ever holds a lock on a file under that name
// that is not the live one. The descriptor (and with it the lock) is
// closed in the background: with the name gone the id is free, and the
// last close of the file, once a sync has written it out, took 0.8 to
// 1.8 ms on a journal-less ext4 (as /run is on some hosts), on every
// run's path.
func (l *idLease) Release() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		os.Remove(l.path)
		go l.f.Close()
	})
}

// errIDTaken is an id someone holds (or a dead holder's processes still use).
var errIDTaken = errors.New("in use")

// maxIDTries bounds how many free-looking ids one lease tries.
const maxIDTries = 4096

// lease leases a free id: one no lease file names (or whose file a dead
// holder left, and no process uses), and no user, group or subordinate
// range of the host names.
func (r *hostIDs) lease() (*idLease, error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("S1: the host-wide directory of id leases: %w", err)
	}
	if fi, err := os.Lstat(r.dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("S1: the host-wide directory of id leases, %s, is not a directory", r.dir)
	}
	reserved, err := r.reservedIDs()
	if err != nil {
		return nil, err
	}
	r.swept.Do(r.sweep)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	start := binary.LittleEndian.Uint32(b[:]) % r.count
	tries := 0
	var used map[uint64]bool // the ids processes hold: read only if a dead holder's lease is found
	scan := func() (map[uint64]bool, error) {
		if used == nil {
			u, err := procIDs(r.proc)
			if err != nil {
				return nil, err
			}
			used = u
		}
		return used, nil
	}
	for k := uint32(0); k < r.count && tries < maxIDTries; k++ {
		id := uint64(r.base) + uint64((start+k)%r.count)
		if inSpans(reserved, id) {
			continue // not a try: a host's subordinate range may cover many
		}
		tries++
		l, err := r.take(id, scan)
		if errors.Is(err, errIDTaken) {
			continue
		}
		return l, err
	}
	return nil, &idsSpentError{fmt.Sprintf("S1: no free host id for a run: %d ids of %d..%d looked at, each leased (in %s) or named by the host's users, groups or subordinate ranges", tries, r.base, uint64(r.base)+uint64(r.count)-1, r.dir)}
}

// idsSpentError is a lease refused because every id looked at is held:
// a limit of the host's (too many runs at once), not a failure.
type idsSpentError struct{ msg string }

func (e *idsSpentError) Error() string { return e.msg }

// Limit puts it in the limit category.
func (e *idsSpentError) Limit() bool { return true }

// take leases id, if it is free.
func (r *hostIDs) take(id uint64, scan func() (map[uint64]bool, error)) (*idLease, error) {
	path := filepath.Join(r.dir, strconv.FormatUint(id, 10))
	// A new lease file is made under a temporary name, locked, and linked
	// into place: under its id's name a lease file is locked from the
	// start while its maker lives.
	tmp, err := os.CreateTemp(r.dir, ".new-")
	if err != nil {
		return nil, fmt.Errorf("S1: lease a host id: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("S1: lease a host id: %w", err)
	}
	fmt.Fprintf(tmp, "pid %d\n", os.Getpid())
	err = os.Link(tmp.Name(), path)
	if err == nil {
		return &idLease{ID: int(id), f: tmp, path: path}, nil
	}
	tmp.Close()
	if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("S1: lease a host id: %w", err)
	}
	// Someone's: alive (it is locked), or dead (its holder ended without
	// releasing it: killed).
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errIDTaken // released meanwhile; another is as good
	}
	if err != nil {
		return nil, fmt.Errorf("S1: lease a host id: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errIDTaken
		}
		return nil, fmt.Errorf("S1: lease a host id: %w", err)
	}
	// The file locked must be the one under the name still: a holder
	// removes its file before it unlocks it.
	if !sameFile(f, path) {
		f.Close()
		return nil, errIDTaken
	}
	// Its holder died: its processes end with their pid namespace's
	// init, which may take a moment. None may be left.
	used, err := scan()
	if err != nil {
		f.Close()
		return nil, err
	}
	if used[id] {
		f.Close()
		return nil, errIDTaken
	}
	f.Truncate(0)
	f.WriteAt([]byte(fmt.Sprintf("pid %d\n", os.Getpid())), 0)
	return &idLease{ID: int(id), f: f, path: path}, nil
}

// sweep removes, once per process, the leases holders that were killed
// left behind (unlocked) and whose ids no process holds any more: a
// service that restarts after a crash clears its own. Errors leave them;
// a lease that finds one takes it over just the same.
func (r *hostIDs) sweep() {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	var used map[uint64]bool
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue // a temporary name, someone's making
		}
		path := filepath.Join(r.dir, e.Name())
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && sameFile(f, path) {
			if used == nil {
				if used, err = procIDs(r.proc); err != nil {
					f.Close()
					return
				}
			}
			if !used[id] {
				os.Remove(path) // still locked: no one holds a lock on a file under this name but us
			}
		}
		f.Close()
	}
}

// sameFile says whether f is the file at path still.
func sameFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(int(f.Fd()), &a) == nil && unix.Lstat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

// reservedIDs are the spans of ids in the range that the host's users,
// groups and subordinate ranges name; read again when those files change.
func (r *hostIDs) reservedIDs() ([]idSpan, error) {
	files := []string{"passwd", "group", "subuid", "subgid"}
	var stamp strings.Builder
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(r.etc, f)); err == nil {
			fmt.Fprintf(&stamp, "%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stamp == stamp.String() && r.reserved != nil {
		return r.reserved, nil
	}
	spans := []idSpan{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(r.etc, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("S1: ids the host names: %w", err)
		}
		for _, s := range namedIDs(f, b) {
			if s.to >= uint64(r.base) && s.from < uint64(r.base)+uint64(r.count) {
				spans = append(spans, s)
			}
		}
	}
	r.reserved, r.stamp = spans, stamp.String()
	return spans, nil
}

// namedIDs are the ids one of passwd, group, subuid or subgid names:
// a user's uid and gid, a group's gid, a subordinate range. Lines it
// cannot read name nothing.
func namedIDs(file string, b []byte) []idSpan {
	var out []idSpan
	num := func(s string) (uint64, bool) {
		n, err := strconv.ParseUint(s, 10, 32)
		return n, err == nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		switch file {
		case "passwd":
			if len(f) >= 4 {
				for _, s := range f[2:4] {
					if n, ok := num(s); ok {
						out = append(out, idSpan{n, n})
					}
				}
			}
		case "group":
			if len(f) >= 3 {
				if n, ok := num(f[2]); ok {
					out = append(out, idSpan{n, n})
				}
			}
		default: // subuid, subgid: name:start:count
			if len(f) == 3 {
				start, ok1 := num(f[1])
				n, ok2 := num(f[2])
				if ok1 && ok2 && n > 0 {
					out = append(out, idSpan{start, start + n - 1})
				}
			}
		}
	}
	return out
}

func inSpans(spans []idSpan, id uint64) bool {
	return slices.ContainsFunc(spans, func(s idSpan) bool { return s.from <= id && id <= s.to })
}

// procIDs are the user and group ids (real, effective, saved and file
// system) that the processes under proc hold.
func procIDs(proc string) (map[uint64]bool, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("S1: list the host's processes: %w", err)
	}
	used := map[uint64]bool{}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		uids, gids, err := procCreds(filepath.Join(proc, e.Name()))
		if err != nil {
			continue // gone
		}
		for _, id := range append(uids, gids...) {
			used[id] = true
		}
	}
	return used, nil
}

// procCreds reads a process's uids and gids from its status file.
func procCreds(dir string) (uids, gids []uint64, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return nil, nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "Uid" && k != "Gid") {
			continue
		}
		var ids []uint64
		for _, f := range strings.Fields(v) {
			if n, err := strconv.ParseUint(f, 10, 32); err == nil {
				ids = append(ids, n)
			}
		}
		if k == "Uid" {
			uids = ids
		} else {
			gids = ids
		}
	}
	if len(uids) != 4 || len(gids) != 4 {
		return nil, nil, fmt.Errorf("%s: no uid and gid lines", dir)
	}
	return uids, gids, nil
}

// hostIdentity checks, from the host, that the run whose init is initPid
// holds the host id id alone: that its program (init's child) runs as id
// (every uid and gid), in a user namespace of its own whose maps hold
// 65534 → id alone, and that no process outside the run's pid namespace
// holds id as any of its ids. It says what it found either way.
func hostIdentity(proc string, initPid, id int) (bool, string) {
	ns := func(pid, kind string) string {
		s, _ := os.Readlink(filepath.Join(proc, pid, "ns", kind))
		return s
	}
	runNS := ns(strconv.Itoa(initPid), "pid")
	hostUserNS := ns("self", "user")
	if runNS == "" || hostUserNS == "" {
		return false, fmt.Sprintf("the run's pid namespace (init, pid %d) or the host's user namespace cannot be read", initPid)
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return false, err.Error()
	}
	var inRun, outside []string
	checked := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		uids, gids, err := procCreds(filepath.Join(proc, e.Name()))
		if err != nil {
			continue
		}
		checked++
		if !slices.Contains(uids, uint64(id)) && !slices.Contains(gids, uint64(id)) {
			continue
		}
		if ns(e.Name(), "pid") != runNS {
			comm, _ := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
			outside = append(outside, fmt.Sprintf("pid %s (%s)", e.Name(), strings.TrimSpace(string(comm))))
			continue
		}
		all := func(ids []uint64) bool {
			return !slices.ContainsFunc(ids, func(n uint64) bool { return n != uint64(id) })
		}
		umap, _ := os.ReadFile(filepath.Join(proc, e.Name(), "uid_map"))
		gmap, _ := os.ReadFile(filepath.Join(proc, e.Name(), "gid_map"))
		want := strings.Fields(fmt.Sprintf("65534 %d 1", id))
		if !all(uids) || !all(gids) || !slices.Equal(strings.Fields(string(umap)), want) || !slices.Equal(strings.Fields(string(gmap)), want) ||
			ns(e.Name(), "user") == hostUserNS {
			return false, fmt.Sprintf("pid %s of the run: uids %v, gids %v, uid_map %q, gid_map %q, its own user namespace: %v; want %d throughout, mapped from 65534 alone",
				e.Name(), uids, gids, strings.TrimSpace(string(umap)), strings.TrimSpace(string(gmap)), ns(e.Name(), "user") != hostUserNS, id)
		}
		inRun = append(inRun, e.Name())
	}
	switch {
	case len(outside) > 0:
		return false, fmt.Sprintf("host id %d is held outside the run too: %s", id, strings.Join(outside, ", "))
	case len(inRun) == 0:
		return false, fmt.Sprintf("no process of the run holds host id %d: the program does not run as its leased id", id)
	}
	return true, fmt.Sprintf("the run's program is host uid and gid %d (65534 inside, in a user namespace of its own, leased from %d..%d); of the host's %d processes, none outside the run holds it",
		id, IDBase, IDBase+IDCount-1, checked)
}

// ids is the range this executor leases from.
func (e *Executor) ids() *hostIDs {
	if e.hostIDs != nil {
		return e.hostIDs
	}
	return hostRange
}
