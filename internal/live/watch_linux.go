package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/host"
)

// What a watch follows: names made, written, removed and moved in each
// directory watched, and the directory itself going away or its
// filesystem being unmounted (a suspension, a close).
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// Watch streams the changes under directory p of a live sandbox (under
// one of its storage grants, which owner may read) to send, in the
// order the kernel reports them, until ctx ends, send fails, the
// directory goes, or the sandbox is suspended, closed or removed (an
// "ended" event says which). recursive follows every directory beneath
// it as well, at most MaxWatchDirs, those made while it runs included.
//
// Everything a run wrote is hostile: each directory is opened beneath
// the grant's directory with no symbolic link followed and no other
// mount crossed, and watched through that descriptor, so a link or a
// directory swapped for one never points a watch outside the grant.
// Events are held for a slow reader up to WatchBuffer; past that, and
// when the kernel's own queue overflows, they are dropped and an
// "overflow" event says so. A watch is not activity: it does not keep a
// sandbox from its idle fence.
func (h *Manager) Watch(ctx context.Context, id, owner, p string, recursive bool, send func(WatchEvent) error) error {
	wt, err := h.OpenWatch(ctx, id, owner, p, recursive)
	if err != nil {
		return err
	}
	return wt.Run(ctx, send)
}

// Watching is a watch set up (OpenWatch) and not yet run.
type Watching struct {
	h  *Manager
	sb *Sandbox
	w  *watcher
}

// OpenWatch checks and sets up a watch of directory p (see Watch): every
// refusal is said here, before anything streams; from its return on,
// changes are seen. Run streams them; Close drops a watch never run.
func (h *Manager) OpenWatch(ctx context.Context, id, owner, p string, recursive bool) (*Watching, error) {
	o, err := h.openReadable(ctx, id, owner, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer o.f.Close()
	sb, s, rest, root := o.sb, o.grant, o.rest, o.f
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", p, err)
	}
	w := &watcher{grant: s.Path, recursive: recursive, in: os.NewFile(uintptr(ifd), "inotify"), dirs: map[int32]string{},
		out: make(chan WatchEvent, WatchBuffer)}
	if err := w.add(root, rest, false); err != nil {
		w.in.Close()
		return nil, err
	}
	return &Watching{h: h, sb: sb, w: w}, nil
}

// Close drops a watch that was not run.
func (wt *Watching) Close() { wt.w.in.Close() }

// Run streams the watch's events to send until it ends (see Watch).
func (wt *Watching) Run(ctx context.Context, send func(WatchEvent) error) error {
	h, sb, w := wt.h, wt.sb, wt.w
	defer w.in.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The sandbox's end (suspended, closed, removed) ends the watch, also
	// where its filesystem stays mounted.
	go func() {
		t := time.NewTicker(WatchCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !h.isLive(sb) {
				w.end("the sandbox is no longer live (suspended, closed or removed)")
				w.in.Close()
				return
			}
		}
	}()
	go func() {
		<-ctx.Done()
		w.in.Close() // wakes the read
	}()
	go w.read()
	for e := range w.out {
		err := send(e)
		if err == nil && w.caughtUp() {
			// Events were dropped while this reader was slow and none
			// came since to carry the word: said now.
			err = send(WatchEvent{Op: "overflow", Why: lostWhy})
		}
		if err != nil {
			cancel()
			for range w.out { // let the reader end
			}
			return err
		}
	}
	return ctx.Err()
}

// isLive says whether sb is still a live sandbox of h.
func (h *Manager) isLive(sb *Sandbox) bool {
	h.sandboxes.mu.Lock()
	cur := h.sandboxes.m[sb.ID]
	h.sandboxes.mu.Unlock()
	if cur != sb {
		return false
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return !sb.closed
}

type watcher struct {
	grant     string
	recursive bool
	in        *os.File

	mu     sync.Mutex
	rootWd int32            // the watched directory's own watch
	dirs   map[int32]string // watch descriptor → directory, beneath the grant ("" the grant's own)
	full   bool             // MaxWatchDirs reached: said once
	lost   bool             // events dropped for a slow reader: to be said
	ended  bool
	out    chan WatchEvent
}

// emit queues e, dropping it (and saying so later) when the reader is
// too slow. The caller holds w.mu.
func (w *watcher) emit(e WatchEvent) {
	if w.ended {
		return
	}
	if w.lost {
		select {
		case w.out <- WatchEvent{Op: "overflow", Why: lostWhy}:
			w.lost = false
		default:
			return
		}
	}
	select {
	case w.out <- e:
	default:
		w.lost = true
	}
}

const lostWhy = "the reader was too slow: events were lost"

// caughtUp says, once, that the reader has taken every event queued
// while some were dropped.
func (w *watcher) caughtUp() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lost && len(w.out) == 0 {
		w.lost = false
		return true
	}
	return false
}

// end says the watch is over, once, and closes the stream.
func (w *watcher) end(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	if why != "" {
		// Said even past a full buffer: the reader learns why it ends.
		w.out <- WatchEvent{Op: "ended", Why: why}
	}
	w.ended = true
	close(w.out)
}

// sandboxPath is rel (beneath the grant) as the sandbox names it.
func (w *watcher) sandboxPath(rel string) string {
	if rel == "" {
		return w.grant
	}
	return w.grant + "/" + rel
}

// add watches the directory d (rel beneath the grant) and, recursively,
// those beneath it; announce says each entry found beneath a directory
// made after the watch began (what was made before its own watch).
func (w *watcher) add(d *os.File, rel string, announce bool) error {
	w.mu.Lock()
	if len(w.dirs) >= MaxWatchDirs {
		if !w.full {
			w.full = true
			w.emit(WatchEvent{Op: "overflow", Path: w.sandboxPath(rel), Why: fmt.Sprintf("more than %d directories: those beyond are not watched", MaxWatchDirs)})
		}
		w.mu.Unlock()
		return nil
	}
	wd, err := unix.InotifyAddWatch(int(w.in.Fd()), fmt.Sprintf("/proc/self/fd/%d", d.Fd()), watchMask)
	if err != nil {
		w.mu.Unlock()
		if errors.Is(err, unix.ENOSPC) {
			return &host.LimitError{What: fmt.Sprintf("watch %s: the host's inotify watches are all in use", w.sandboxPath(rel))}
		}
		return fmt.Errorf("watch %s: %w", w.sandboxPath(rel), err)
	}
	if len(w.dirs) == 0 {
		w.rootWd = int32(wd)
	}
	w.dirs[int32(wd)] = rel
	w.mu.Unlock()
	if !w.recursive && !announce {
		return nil
	}
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil // gone meanwhile: its own events say so
	}
	for _, e := range ents {
		child := path.Join(rel, e.Name())
		if announce {
			w.mu.Lock()
			w.emit(WatchEvent{Op: "create", Path: w.sandboxPath(child), Dir: e.IsDir()})
			w.mu.Unlock()
		}
		if !w.recursive || !e.IsDir() { // a link's type is a link: never followed
			continue
		}
		sub, err := openBeneath(w.grant, child, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			continue // gone, or swapped for a link meanwhile
		}
		err = w.add(sub, child, announce)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// read turns the kernel's events into the watch's, until its descriptor
// is closed or the watched directory goes.
func (w *watcher) read() {
	buf := make([]byte, 64<<10)
	moved := map[uint32]WatchEvent{} // a move's first half, by cookie, until its second
	for {
		n, err := w.in.Read(buf)
		if err != nil || n < unix.SizeofInotifyEvent {
			w.end("")
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				nb := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				name = strings.TrimRight(string(nb), "\x00")
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if why := w.one(ev, name, moved); why != "" {
				w.end(why)
				return
			}
		}
		// A move whose second half did not come with it left the watched
		// directories (or came from outside): a delete.
		w.mu.Lock()
		for c, e := range moved {
			e.Op = "delete"
			w.emit(e)
			delete(moved, c)
		}
		w.mu.Unlock()
	}
}

// one handles one kernel event; it returns why the watch ends, if it
// does.
func (w *watcher) one(ev *unix.InotifyEvent, name string, moved map[uint32]WatchEvent) string {
	mask := ev.Mask
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.mu.Lock()
		w.emit(WatchEvent{Op: "overflow", Why: "the kernel's event queue overflowed: events were lost"})
		w.mu.Unlock()
		return ""
	}
	w.mu.Lock()
	rel, ok := w.dirs[ev.Wd]
	w.mu.Unlock()
	if !ok {
		return ""
	}
	dir := mask&unix.IN_ISDIR != 0
	switch {
	case mask&unix.IN_UNMOUNT != 0:
		return "the sandbox's storage was unmounted (suspended, closed or removed)"
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		if ev.Wd == w.rootWd {
			return "the watched directory was removed or moved"
		}
		return ""
	case mask&unix.IN_IGNORED != 0:
		w.mu.Lock()
		delete(w.dirs, ev.Wd)
		w.mu.Unlock()
		if ev.Wd == w.rootWd {
			return "the watched directory is gone"
		}
		return ""
	}
	child := path.Join(rel, name)
	e := WatchEvent{Path: w.sandboxPath(child), Dir: dir}
	switch {
	case mask&unix.IN_CREATE != 0:
		e.Op = "create"
	case mask&unix.IN_MODIFY != 0:
		e.Op = "modify"
	case mask&unix.IN_DELETE != 0:
		e.Op = "delete"
	case mask&unix.IN_MOVED_FROM != 0:
		moved[ev.Cookie] = WatchEvent{Path: e.Path, Dir: dir}
		return ""
	case mask&unix.IN_MOVED_TO != 0:
		if from, ok := moved[ev.Cookie]; ok {
			delete(moved, ev.Cookie)
			e.Op, e.From = "rename", from.Path
			if dir {
				w.renamed(strings.TrimPrefix(strings.TrimPrefix(from.Path, w.grant), "/"), child)
			}
		} else {
			e.Op = "create" // moved in from outside what is watched
		}
	default:
		return ""
	}
	w.mu.Lock()
	w.emit(e)
	w.mu.Unlock()
	if dir && w.recursive && (e.Op == "create") {
		// A directory made (or moved in): watched too, and what was made
		// in it before its watch said.
		if sub, err := openBeneath(w.grant, child, unix.O_RDONLY|unix.O_DIRECTORY, 0); err == nil {
			w.add(sub, child, true)
			sub.Close()
		}
	}
	return ""
}

// renamed follows a directory moved within the watch: its watches, and
// those beneath it, now name the new path.
func (w *watcher) renamed(from, to string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, rel := range w.dirs {
		if rel == from {
			w.dirs[wd] = to
		} else if r, ok := strings.CutPrefix(rel, from+"/"); ok {
			w.dirs[wd] = to + "/" + r
		}
	}
}
