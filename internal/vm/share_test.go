//go:build linux

package vm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
)

// TestSharesReachGrantsOneWay: the S5 executor itself (runs and live
// sandboxes alike, without the host's check before it) refuses a grant
// whose path passes through a link, naming it, and one that reaches the
// state directory, before any VM boots.
func TestSharesReachGrantsOneWay(t *testing.T) {
	im := image(t, "")
	state := filepath.Join(t.TempDir(), "state")
	os.MkdirAll(filepath.Join(state, "cache"), 0o700)
	e := New(Config{ImageDir: filepath.Dir(im.Kernel), Accel: "tcg", Jail: jail(t), StateDir: state})[0]
	d, target := t.TempDir(), t.TempDir()
	os.Symlink(target, filepath.Join(d, "link"))
	os.MkdirAll(filepath.Join(d, "real"), 0o755)
	os.Symlink("/etc", filepath.Join(d, "real", "etc"))
	for _, tc := range []struct{ path, want string }{
		{d + "/link", d + "/link is a symbolic link (to " + target + ")"},
		{d + "/link/sub", d + "/link is a symbolic link"},
		{d + "/real/etc", d + "/real/etc is a symbolic link (to /etc)"},
		{state, "is sandbox's state directory"},
		{state + "/cache", "lies inside sandbox's state directory"},
		{filepath.Dir(state), "contains sandbox's state directory"},
		{"/proc/sys", "procfs"},
	} {
		g := grant.Set{Kernel: true, Storage: []grant.Storage{{Path: tc.path, Mode: grant.RW}}}
		j := nativeJob("/usr/bin/true")
		j.Grants = g
		// Refused before a boot: a VM that booted would be ended at once.
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, rerr := e.Run(ctx, j)
		_, oerr := e.Open(ctx, g, unit.Limits{}, nil)
		cancel()
		for what, err := range map[string]error{"run": rerr, "live sandbox": oerr} {
			var se *grant.StorageError
			if !errors.As(err, &se) || !se.Invalid() || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s with fs:%s:rw: %v, want it refused: %q", what, tc.path, err, tc.want)
			}
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the link's target holds %v", ents)
	}
}

// TestShareIsTheDirectoryChecked closes the gap between the check and
// QEMU's use: a share is held (walked, checked, cloned), then its path
// is made a link to another directory and its directory moved away
// before QEMU starts. The guest's writes land in the directory checked,
// wherever it is now, and never where the link points. Then the walk
// itself under a race: a path flipped between a directory and a link as
// fast as it can be is either refused as a link or held as the
// directory, never as the link's target.
func TestShareIsTheDirectoryChecked(t *testing.T) {
	im := image(t, "")
	d, target := t.TempDir(), t.TempDir()
	p := filepath.Join(d, "x")
	os.Mkdir(p, 0o777)
	sh, err := hold(hostpath.Guard{}, wire.Mount{Tag: "g0", Path: p}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	moved := filepath.Join(d, "moved")
	if err := os.Rename(p, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	m := start(t, Spec{Image: im, Shares: append(shares(t, wire.Mount{Tag: "sys0", Path: "/usr", ReadOnly: true}), sh)})
	sh.Close()
	var out bytes.Buffer
	st, err := m.Exec(context.Background(), wire.Command{Path: "/usr/bin/sh", Argv: []string{"sh", "-c", "echo written > " + p + "/file && ls " + p}, Dir: "/"}, nil, &out, &out, time.Second)
	if err != nil || st.Code != 0 {
		t.Fatalf("in the guest: %+v %v %q", st, err, out.String())
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Fatalf("the guest wrote where the swapped-in link points: %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(moved, "file")); err != nil || string(b) != "written\n" {
		t.Fatalf("the checked directory holds %q (%v)", b, err)
	}

	// The walk under a race.
	race := filepath.Join(t.TempDir(), "r")
	dirv, linkv := race+".dir", race+".link"
	os.Mkdir(dirv, 0o755)
	os.Symlink(target, linkv)
	var real, tgt unix.Stat_t
	unix.Stat(dirv, &real)
	unix.Stat(target, &tgt)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			from := dirv
			if i%2 == 1 {
				from = linkv
			}
			os.Rename(from, race) // race is now the directory, now the link
			os.Rename(race, from)
		}
	}()
	var held, refused int
	for i := 0; i < 3000; i++ {
		sh, err := hold(hostpath.Guard{}, wire.Mount{Tag: "g0", Path: race}, "")
		var le *hostpath.LinkError
		switch {
		case err == nil:
			var st unix.Stat_t
			unix.Fstat(int(sh.tree.Fd()), &st)
			sh.Close()
			if st.Ino == tgt.Ino && st.Dev == tgt.Dev {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("attempt %d held the link's target", i)
			}
			if st.Ino != real.Ino || sh.ID != (hostpath.ID{Dev: uint64(real.Dev), Ino: real.Ino}) {
				t.Fatalf("attempt %d held %d, not the directory %d", i, st.Ino, real.Ino)
			}
			held++
		case errors.As(err, &le):
			refused++
		case errors.Is(err, os.ErrNotExist):
		default:
			stop.Store(true)
			wg.Wait()
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("3000 holds under the race: %d held the directory, %d refused the link, the rest found nothing there", held, refused)
}

// TestHeldShareIsBoundedAtTheHost: what QEMU is handed for a share is a
// clone of the directory's mount that the host's VFS itself keeps
// nosuid and nodev, and read-only for a read-only share: a monitor that
// escaped its guest cannot write a read-only share through it.
func TestHeldShareIsBoundedAtTheHost(t *testing.T) {
	for _, ro := range []bool{true, false} {
		d := t.TempDir()
		sh, err := hold(hostpath.Guard{}, wire.Mount{Tag: "g0", Path: d, ReadOnly: ro}, "")
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Statfs_t
		if err := unix.Fstatfs(int(sh.tree.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 || (st.Flags&unix.ST_RDONLY != 0) != ro {
			t.Errorf("read-only %v: the held mount's flags are %#x", ro, st.Flags)
		}
		fd, err := unix.Openat(int(sh.tree.Fd()), "x", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if ro != (err != nil) || (ro && !errors.Is(err, unix.EROFS)) {
			t.Errorf("read-only %v: a file made through the held mount: %v", ro, err)
		}
		if err == nil {
			unix.Close(fd)
		}
		sh.Close()
	}
}
