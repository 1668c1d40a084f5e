package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
)

// Partial is a run directory being written: runs/.partial-LEASE-N until
// Commit renames it to its address. Abort (or a crash: gc) removes it.
type Partial struct {
	Dir   string
	s     *Store
	files []*os.File
	ready map[string]*os.File // made ahead (Ready), not yet handed out
	sync  *Syncer             // opened before anything was written in Dir
	done  bool
}

// Begin makes a run directory to write a run's records in, or takes one
// made ahead (Ready).
func (s *Store) Begin() (*Partial, error) {
	if p := s.pool.take(s); p != nil {
		return p, nil
	}
	return s.begin(nil)
}

func (s *Store) begin(names []string) (*Partial, error) {
	runs := s.Path("runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return nil, err
	}
	dir, err := state.MkdirNamed(runs, ".partial", s.Namer())
	if err != nil {
		return nil, err
	}
	sy, err := OpenSyncer(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &Partial{Dir: dir, s: s, sync: sy}
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(dir, n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			p.Abort()
			return nil, err
		}
		if p.ready == nil {
			p.ready = map[string]*os.File{}
		}
		p.ready[n] = f
	}
	// Nothing is synced here: Commit makes the files and the
	// directory's entries durable at once.
	return p, nil
}

// Ready has the store keep n run directories made ahead, each holding
// the named files empty, so that a run does not wait for their creation
// (on some filesystems a third of a millisecond a file). They are made
// in the background, after each Begin; Close removes those unused, and
// gc those of a process that ended.
func (s *Store) Ready(n int, names []string) {
	s.pool.mu.Lock()
	s.pool.n, s.pool.names = n, names
	s.pool.mu.Unlock()
	s.pool.refill(s)
}

// Close removes the run directories made ahead and unused.
func (s *Store) Close() {
	s.pool.mu.Lock()
	s.pool.closed = true
	ready := s.pool.ready
	s.pool.ready = nil
	s.pool.mu.Unlock()
	s.pool.wg.Wait()
	s.pool.mu.Lock()
	ready = append(ready, s.pool.ready...)
	s.pool.ready = nil
	s.pool.mu.Unlock()
	for _, p := range ready {
		p.Abort()
	}
}

// pool holds run directories made ahead.
type pool struct {
	mu      sync.Mutex
	n       int
	names   []string
	ready   []*Partial
	filling int
	closed  bool
	wg      sync.WaitGroup
}

func (pl *pool) take(s *Store) *Partial {
	pl.mu.Lock()
	var p *Partial
	if len(pl.ready) > 0 {
		p = pl.ready[len(pl.ready)-1]
		pl.ready = pl.ready[:len(pl.ready)-1]
	}
	want := pl.n > 0
	pl.mu.Unlock()
	if want {
		pl.refill(s)
	}
	return p
}

// refill makes directories in the background up to n, one at a time.
func (pl *pool) refill(s *Store) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed || pl.filling > 0 || len(pl.ready) >= pl.n {
		return
	}
	pl.filling++
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		for {
			pl.mu.Lock()
			if pl.closed || len(pl.ready) >= pl.n {
				pl.filling--
				pl.mu.Unlock()
				return
			}
			names := pl.names
			pl.mu.Unlock()
			p, err := s.begin(names)
			pl.mu.Lock()
			if err != nil || pl.closed {
				pl.filling--
				pl.mu.Unlock()
				if p != nil {
					p.Abort()
				}
				return // a full disk, say: runs make their own
			}
			pl.ready = append(pl.ready, p)
			pl.mu.Unlock()
		}
	}()
}

// Name is the partial directory's name without its leading dot (what a
// run's cgroup is named after).
func (p *Partial) Name() string { return filepath.Base(p.Dir)[1:] }

// Create makes a new file in the run directory, kept open until Commit
// syncs it or Abort.
func (p *Partial) Create(name string) (*os.File, error) {
	if f, ok := p.ready[name]; ok {
		delete(p.ready, name)
		p.files = append(p.files, f)
		return f, nil
	}
	f, err := os.OpenFile(filepath.Join(p.Dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	p.files = append(p.files, f)
	return f, nil
}

// Write makes a file holding b.
func (p *Partial) Write(name string, b []byte) error {
	f, err := p.Create(name)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return err
}

// Commit makes every file of the run directory and its entries durable
// with one sync (a syncfs of the store's filesystem where the system
// has it, else an fsync of each file and of the directory), renames the
// directory to runs/<id hex>, and fsyncs runs/ (shared with concurrent
// commits): two syncs a run. It returns the run's directory. An error
// before the rename leaves nothing under the run's name; an error after
// it says the run is stored but its name may not survive a crash.
func (p *Partial) Commit(id addr.Addr) (string, error) { return p.CommitIndexed(id, nil) }

// CommitIndexed commits, and indexes the run as row (store.Index): a
// pending row before the rename, made final after it.
func (p *Partial) CommitIndexed(id addr.Addr, row *IndexedRun) (string, error) {
	for name, f := range p.ready { // made ahead and not written: not part of the run
		f.Close()
		os.Remove(filepath.Join(p.Dir, name))
	}
	p.ready = nil
	if err := p.makeDurable(); err != nil {
		return "", fmt.Errorf("store run: %w", err)
	}
	crash.At(crash.Sealing)
	runs := filepath.Dir(p.Dir)
	final := filepath.Join(runs, id.Hex())
	p.s.IndexBefore(row)
	crash.At(crash.Indexed)
	if err := os.Rename(p.Dir, final); err != nil {
		return "", fmt.Errorf("store run: %w", err)
	}
	p.done = true
	p.close()
	crash.At(crash.Renamed)
	p.s.IndexAfter(row)
	p.s.syncs.Add(1)
	if err := p.s.commit.sync(runs); err != nil {
		return final, &UnsyncedError{Dir: final, Err: err}
	}
	return final, nil
}

// sync makes the run directory's files and entries durable: one syncfs
// where the system has it, else a sync of each file and the directory.
func (p *Partial) makeDurable() error {
	names := make([]string, len(p.files))
	for i, f := range p.files {
		names[i] = filepath.Base(f.Name())
	}
	n, err := p.sync.Sync(names)
	p.s.syncs.Add(int64(n))
	return err
}

// Syncs is how many sync calls this store's run commits have asked for
// (a call that shared another's round counts too): benchmarks read it.
func (s *Store) Syncs() int64 { return s.syncs.Load() }

// UnsyncedError is a run stored under its name whose directory entry
// could not be made durable.
type UnsyncedError struct {
	Dir string
	Err error
}

func (e *UnsyncedError) Error() string {
	return fmt.Sprintf("the run is stored at %s, but its directory could not be synced: %v", e.Dir, e.Err)
}

func (e *UnsyncedError) Unwrap() error { return e.Err }

// Abort removes the directory unless it was committed.
func (p *Partial) Abort() {
	p.close()
	if !p.done {
		os.RemoveAll(p.Dir)
		p.done = true
	}
}

func (p *Partial) close() {
	for _, f := range p.files {
		f.Close()
	}
	for _, f := range p.ready {
		f.Close()
	}
	p.files, p.ready = nil, nil
	if p.sync != nil {
		p.sync.Close()
		p.sync = nil
	}
}

// groupSync fsyncs a directory on behalf of many callers: a caller
// whose change was made before a round started is covered by that
// round, so while one fsync runs, every caller that arrives waits for
// the next one, which they all share.
type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	started uint64 // rounds begun
	done    uint64 // rounds finished
	busy    bool
	err     error // the last finished round's
	waiting int   // callers waiting for a round (tests)
	// syncDir syncs for the round (nil: safefile.SyncDir, an fsync of
	// the directory).
	syncDir func(string) error
}

func (g *groupSync) sync(dir string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
	// The round running now may have begun before this caller's change:
	// it needs the next one.
	need := g.started + 1
	for g.done < need {
		if g.busy {
			g.waiting++
			g.cond.Wait()
			g.waiting--
			continue
		}
		g.busy = true
		g.started++
		round := g.started
		g.mu.Unlock()
		do := g.syncDir
		if do == nil {
			do = safefile.SyncDir
		}
		err := do(dir)
		g.mu.Lock()
		g.busy, g.done, g.err = false, round, err
		g.cond.Broadcast()
	}
	return g.err
}
