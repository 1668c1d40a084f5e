package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/store"
)

// names is a Namer over a table: each bundle names the objects listed
// for it (itself among them); a job's result is the text of the one
// address it names. Bundle, where block is set, waits on it first.
type names struct {
	mu      sync.Mutex
	bundles map[addr.Addr][]addr.Addr
	entered chan struct{} // where not nil: told each time Bundle is called
	block   chan struct{} // where not nil: Bundle waits for it
	fail    error
}

func (n *names) Bundle(ctx context.Context, a addr.Addr) ([]addr.Addr, error) {
	if n.entered != nil {
		n.entered <- struct{}{}
	}
	if n.block != nil {
		<-n.block
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return nil, n.fail
	}
	as, ok := n.bundles[a]
	if !ok {
		return nil, fmt.Errorf("bundle %s: not in the store", a)
	}
	return append([]addr.Addr{a}, as...), nil
}

func (n *names) Result(kind string, result []byte) ([]addr.Addr, error) {
	a, err := addr.Parse(string(result))
	if err != nil {
		return nil, err
	}
	return []addr.Addr{a}, nil
}

func (n *names) set(bundle addr.Addr, objects ...addr.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.bundles == nil {
		n.bundles = map[addr.Addr][]addr.Addr{}
	}
	n.bundles[bundle] = objects
}

// put stores each text in b and returns their addresses.
func put(t testing.TB, b store.Blobs, texts ...string) []addr.Addr {
	t.Helper()
	var as []addr.Addr
	for _, s := range texts {
		a := addr.Of([]byte(s))
		if err := b.PutBlob(a, []byte(s)); err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	return as
}

func blobStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// completeWith claims the oldest job m takes of kind and completes it
// with result, under a hold on the blob store.
func completeWith(t testing.TB, m *Member, kind string, result []byte) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := m.Enqueue(ctx, Job{Kind: kind, Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Claim(ctx, time.Minute, kind)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CompleteHeld(ctx, hold(t, m), l, result); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestCollectRemovesWhatNoOneNames: a collection keeps what a kept
// sandbox's bundle names and what a fleet result not yet taken names,
// and removes the rest: a closed sandbox's objects, a taken result's,
// objects no row names. A dry run says the same and removes nothing.
func TestCollectRemovesWhatNoOneNames(t *testing.T) {
	c, _ := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	n := &names{}
	o := put(t, b, "bundle 1", "tree 1", "chunk 1", "bundle 2", "tree 2", "stray", "run 1", "run 2", "chunk shared")
	n.set(o[0], o[1], o[2], o[8])
	n.set(o[3], o[4], o[8])
	for _, s := range []struct {
		id     string
		bundle addr.Addr
	}{{"sb-000000000001", o[0]}, {"sb-000000000002", o[3]}} {
		if err := m.SandboxSuspended(ctx, hold(t, m), s.id, "", addr.Of([]byte("head")), s.bundle, addr.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.SandboxClosed(ctx, "sb-000000000002"); err != nil {
		t.Fatal(err)
	}
	completeWith(t, m, "item", []byte(o[6].String()))
	taken := completeWith(t, m, "item", []byte(o[7].String()))
	if err := c.ResultTaken(ctx, taken); err != nil {
		t.Fatal(err)
	}
	want := Collection{Sandboxes: 1, Results: 1, Named: 5, Stored: 9, Removed: 4, DryRun: true}
	got, err := c.CollectBlobs(ctx, b, n, "test", true)
	if err != nil || got != want {
		t.Fatalf("dry run: %+v %v, want %+v", got, err, want)
	}
	for _, a := range o {
		if !b.HasBlob(a) {
			t.Fatalf("a dry run removed %s", a)
		}
	}
	want.DryRun, want.Epoch = false, 1
	if got, err = c.CollectBlobs(ctx, b, n, "test", false); err != nil || got != want {
		t.Fatalf("collect: %+v %v, want %+v", got, err, want)
	}
	for i, a := range o {
		keep := i == 0 || i == 1 || i == 2 || i == 6 || i == 8
		if b.HasBlob(a) != keep {
			t.Errorf("object %d: stored %v after the collection, want %v", i, b.HasBlob(a), keep)
		}
	}
	// Once more: nothing left to remove, and the epoch moved on.
	want.Stored, want.Removed, want.Epoch = 5, 0, 2
	if got, err = c.CollectBlobs(ctx, b, n, "test", false); err != nil || got != want {
		t.Fatalf("collect again: %+v %v, want %+v", got, err, want)
	}
}

// TestCollectionRemovesNothingItCannotRead: a kept sandbox whose bundle
// cannot be read, or a row whose bundle is not an address, stops the
// collection before anything is removed, naming the sandbox.
func TestCollectionRemovesNothingItCannotRead(t *testing.T) {
	c, logs := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	o := put(t, b, "bundle", "stray")
	if err := m.SandboxSuspended(ctx, hold(t, m), "sb-00000000000a", "", addr.Of([]byte("head")), o[0], addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	n := &names{fail: errors.New("a tree it names is not in the store")}
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "sb-00000000000a") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("an unreadable bundle: %v", err)
	}
	if !b.HasBlob(o[1]) || !strings.Contains(logs.String(), "nothing collected") {
		t.Fatalf("removed with an unreadable bundle kept, or not logged: %s", logs)
	}
	exec(t, c, `UPDATE cluster_sandboxes SET bundle = '\x0102' WHERE id = 'sb-00000000000a'`)
	n.fail = nil
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); !errors.Is(err, ErrEdited) {
		t.Fatalf("a row whose bundle is not an address: %v", err)
	}
	if !b.HasBlob(o[1]) {
		t.Fatal("removed with an edited row kept")
	}
	// Neither collection left its lease behind: hosts store at once.
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.HoldBlobs(hctx); err != nil {
		t.Fatalf("a hold after a failed collection: %v", err)
	}
}

// TestCollectionFencesHosts: a host that looked at the store before a
// collection began is refused when it names what it stored
// (ErrCollected), as a suspension and as a fleet item's result; a host
// that wants to store while a collection runs waits for it to end; a
// second collection is refused while one runs.
func TestCollectionFencesHosts(t *testing.T) {
	c, _ := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	o := put(t, b, "bundle")
	before := hold(t, m)
	id, err := m.Enqueue(ctx, Job{Kind: "item", Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Claim(ctx, time.Minute, "item")
	if err != nil {
		t.Fatal(err)
	}
	n := &names{entered: make(chan struct{}, 1), block: make(chan struct{})}
	n.set(o[0])
	if err := m.SandboxSuspended(ctx, before, "sb-000000000001", "", addr.Of([]byte("head")), o[0], addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.CollectBlobs(ctx, b, n, "test", false)
		done <- err
	}()
	<-n.entered // the collection runs: its epoch is raised
	if err := m.SandboxSuspended(ctx, before, "sb-000000000002", "", addr.Of([]byte("head")), o[0], addr.Addr{}); !errors.Is(err, ErrCollected) {
		t.Fatalf("a suspension held before the collection: %v", err)
	}
	if err := m.CompleteHeld(ctx, before, l, []byte(o[0].String())); !errors.Is(err, ErrCollected) {
		t.Fatalf("a result held before the collection: %v", err)
	}
	if _, err := c.CollectBlobs(ctx, b, n, "other", false); !errors.Is(err, ErrCollecting) {
		t.Fatalf("a second collection: %v", err)
	}
	held := make(chan BlobHold, 1)
	go func() {
		h, err := c.HoldBlobs(ctx)
		if err != nil {
			t.Error(err)
		}
		held <- h
	}()
	select {
	case h := <-held:
		t.Fatalf("a hold taken while a collection runs: %+v", h)
	case <-time.After(5 * holdPoll):
	}
	close(n.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h := <-held
	if h.Epoch != 1 {
		t.Fatalf("the hold after the collection: epoch %d, want 1", h.Epoch)
	}
	if err := m.CompleteHeld(ctx, h, l, []byte(o[0].String())); err != nil {
		t.Fatalf("a result held after the collection: %v", err)
	}
	if st, err := c.JobState(ctx, id); err != nil || st.State != "done" {
		t.Fatalf("the job: %+v %v", st, err)
	}
}

// TestStalledCollectorRemovesNothing: a collector that stalls past its
// lease (here 1 s: its names took 1.5 s) removes nothing once it comes
// back, and hosts store again once the lease has run out.
func TestStalledCollectorRemovesNothing(t *testing.T) {
	c, b, o := oneKept(t)
	ctx := context.Background()
	defer func(d time.Duration) { CollectLease = d }(CollectLease)
	CollectLease = time.Second
	n := &names{block: make(chan struct{})}
	n.set(o[0])
	go func() { time.Sleep(1500 * time.Millisecond); close(n.block) }()
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err == nil || !strings.Contains(err.Error(), "not renewed") {
		t.Fatalf("a collector that stalled past its lease: %v", err)
	}
	if !b.HasBlob(o[1]) {
		t.Fatal("a collector that stalled past its lease removed an object")
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if h, err := c.HoldBlobs(hctx); err != nil || h.Epoch != 1 {
		t.Fatalf("a hold once the stalled collection's lease ran out: %+v %v", h, err)
	}
}

// TestCollectionsBesideSuspensions: hosts suspend again and again, each
// time storing a bundle of its own and an object they share, as a
// suspension does (storing only what the store lacks), while
// collections run one after another; every suspension the cluster keeps
// at the end finds all it names in the store.
func TestCollectionsBesideSuspensions(t *testing.T) {
	c, _ := open(t)
	ms := []*Member{join(t, c, "a"), join(t, c, "b"), join(t, c, "c")}
	ctx := context.Background()
	b := blobStore(t)
	shared := addr.Of([]byte("shared chunk"))
	n := &names{}
	defer func(d time.Duration) { holdPoll = d }(holdPoll)
	holdPoll = 10 * time.Millisecond
	stop := make(chan struct{})
	collected := make(chan int)
	go func() {
		k := 0
		defer func() { collected <- k }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.CollectBlobs(ctx, b, n, "test", false); err != nil {
				t.Error(err)
				return
			}
			k++
			time.Sleep(20 * time.Millisecond) // collections run one after another, not back to back
		}
	}()
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("sb-00000000000%d", i)
			for j := range 8 {
				bundle := []byte(fmt.Sprintf("bundle %d %d", i, j))
				n.set(addr.Of(bundle), shared)
				for try := 0; ; try++ {
					h, err := c.HoldBlobs(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if !b.HasBlob(shared) {
						b.PutBlob(shared, []byte("shared chunk"))
					}
					time.Sleep(time.Millisecond) // between the look and the name
					b.PutBlob(addr.Of(bundle), bundle)
					err = m.SandboxSuspended(ctx, h, id, "", addr.Of([]byte("head")), addr.Of(bundle), addr.Addr{})
					if err == nil {
						break
					}
					if !errors.Is(err, ErrCollected) || try == 100 {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if k := <-collected; k == 0 {
		t.Fatal("no collection ran beside the suspensions")
	}
	if _, err := c.CollectBlobs(ctx, b, n, "test", false); err != nil {
		t.Fatal(err)
	}
	rows, err := c.pool.Query(ctx, `SELECT id, bundle FROM cluster_sandboxes`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	kept := 0
	for rows.Next() {
		var id string
		var a addr.Addr
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			t.Fatal(err)
		}
		copy(a[:], raw)
		kept++
		for _, o := range []addr.Addr{a, shared} {
			if !b.HasBlob(o) {
				t.Errorf("sandbox %s: %s, which its suspension names, was collected", id, o)
			}
		}
	}
	if kept != len(ms) {
		t.Fatalf("%d sandboxes kept, want %d", kept, len(ms))
	}
}

// TestCollectorStopsWhenTheDatabaseSaysItsLeaseEnded: a collector whose
// renewal finds its lease ended by the database's word (here set so by
// hand; a clock that stepped, or another collection) stops at once,
// removing nothing, however much its own clock says it has left.
func TestCollectorStopsWhenTheDatabaseSaysItsLeaseEnded(t *testing.T) {
	c, b, o := oneKept(t)
	ctx := context.Background()
	defer func(d time.Duration) { CollectLease = d }(CollectLease)
	CollectLease = 6 * time.Second
	n := &names{entered: make(chan struct{}, 1), block: make(chan struct{})}
	n.set(o[0])
	done := make(chan error, 1)
	go func() {
		_, err := c.CollectBlobs(ctx, b, n, "test", false)
		done <- err
	}()
	<-n.entered
	exec(t, c, `UPDATE cluster_blobgc SET until = now() - interval '1 hour'`)
	time.Sleep(CollectLease / 6) // its next look asks the database
	close(n.block)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("a collector whose lease the database ended: %v", err)
	}
	if !b.HasBlob(o[1]) {
		t.Fatal("it removed an object after its lease ended")
	}
}

// TestCollectorTakesBackItsOwnLease: a collector whose first statement
// took the lease but whose answer was lost (here: the lease already held
// under the call's name) takes it over; another call, even of the same
// name (two containers of one host name, each pid 1), is refused.
func TestCollectorTakesBackItsOwnLease(t *testing.T) {
	c, _ := open(t)
	ctx := context.Background()
	l, err := c.beginCollect(ctx, "gc (pid 1)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.beginCollect(ctx, "gc (pid 1)"); !errors.Is(err, ErrCollecting) {
		t.Fatalf("another collector of the same name: %v", err)
	}
	var name string
	if err := c.pool.QueryRow(ctx, `SELECT by_host FROM cluster_blobgc`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	again, err := c.leaseAs(ctx, name) // the call's retry
	if err != nil || again.epoch != l.epoch+1 {
		t.Fatalf("its own lease again: %+v %v", again, err)
	}
	c.endCollect(again)
	if h, err := c.HoldBlobs(ctx); err != nil || h.Epoch != again.epoch {
		t.Fatalf("a hold once it ended: %+v %v", h, err)
	}
}

// oneKept is a cluster keeping one suspended sandbox, and a store
// holding its bundle (o[0], which names nothing else) and a stray object
// (o[1]).
func oneKept(t *testing.T) (*Cluster, *store.Store, []addr.Addr) {
	t.Helper()
	c, _ := open(t)
	m := join(t, c, "a")
	b := blobStore(t)
	o := put(t, b, "bundle", "stray")
	if err := m.SandboxSuspended(context.Background(), hold(t, m), "sb-000000000001", "", addr.Of([]byte("head")), o[0], addr.Addr{}); err != nil {
		t.Fatal(err)
	}
	return c, b, o
}

// slowList is a blob store whose listing, once it has listed what the
// store holds, says so and waits.
type slowList struct {
	store.Collectable
	listed, release chan struct{}
}

func (s slowList) EachBlob(ctx context.Context, f func(addr.Addr) error) error {
	if err := s.Collectable.EachBlob(ctx, f); err != nil {
		return err
	}
	s.listed <- struct{}{}
	<-s.release
	return nil
}

// TestHostsStoreWhileTheStoreIsListed: a collection lists the store
// before it takes the store from the hosts, so a host that stores and
// names objects while a (slow) listing runs does not wait for it, and
// what it stored and named then stays; what no one names goes.
func TestHostsStoreWhileTheStoreIsListed(t *testing.T) {
	c, _ := open(t)
	m := join(t, c, "a")
	ctx := context.Background()
	b := blobStore(t)
	stray := put(t, b, "stray")[0]
	s := slowList{Collectable: b, listed: make(chan struct{}), release: make(chan struct{})}
	n := &names{}
	done := make(chan error, 1)
	go func() {
		_, err := c.CollectBlobs(ctx, s, n, "test", false)
		done <- err
	}()
	<-s.listed
	// (A bound for a hang: a hold waits only while a collection's lease runs.)
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := m.c.HoldBlobs(hctx)
	if err != nil {
		close(s.release)
		t.Fatalf("a hold while the store is listed: %v", err)
	}
	o := put(t, b, "bundle stored while listing")[0]
	n.set(o)
	if err := m.SandboxSuspended(ctx, h, "sb-000000000001", "", addr.Of([]byte("head")), o, addr.Addr{}); err != nil {
		close(s.release)
		t.Fatalf("named while the store is listed: %v", err)
	}
	close(s.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !b.HasBlob(o) || b.HasBlob(stray) {
		t.Fatalf("after the collection: stored while listing kept %v (want true), stray kept %v (want false)", b.HasBlob(o), b.HasBlob(stray))
	}
}
