package live

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/store/s3blobs"
	"github.com/opensubstrate/sandbox/internal/store/s3blobs/s3test"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// twoHostCluster is what two hosts' managers see of one cluster
// (Shared and BlobSharer): the last bundle each sandbox was published
// with and the host that published it, and a blob store both use (a
// state directory's, files on disk, as `--blobs file:///DIR` keeps
// them), which counts what is stored in it and read from it.
type twoHostCluster struct {
	mu      sync.Mutex
	bundles map[string][]byte
	holder  map[string]*Manager
	blobs   *countingBlobs
	trust   key.Trust
}

type countingBlobs struct {
	store.Blobs
	mu         sync.Mutex
	puts, gets int
}

func (c *countingBlobs) PutBlob(a addr.Addr, b []byte) error {
	c.mu.Lock()
	c.puts++
	c.mu.Unlock()
	return c.Blobs.PutBlob(a, b)
}

func (c *countingBlobs) Blob(a addr.Addr) ([]byte, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Blobs.Blob(a)
}

// counts returns and zeroes the counts.
func (c *countingBlobs) counts() (puts, gets int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	puts, gets, c.puts, c.gets = c.puts, c.gets, 0, 0
	return
}

// joinTwo makes a and b the hosts of a cluster whose blob store is bs.
func joinTwo(a, b *Manager, bs store.Blobs) *twoHostCluster {
	c := &twoHostCluster{bundles: map[string][]byte{}, holder: map[string]*Manager{}, blobs: &countingBlobs{Blobs: bs},
		trust: key.NewTrust(a.Key.Public(), b.Key.Public())}
	a.Join(hostOf{c, a}, nil)
	b.Join(hostOf{c, b}, nil)
	return c
}

// sharingS2 makes two hosts of a cluster whose blob store is a state
// directory's, and an S2 sandbox on the first.
func sharingS2(t *testing.T) (a, b *Manager, bs *store.Store, c *twoHostCluster, sb SandboxInfo) {
	t.Helper()
	a, b = newHost(t), newHost(t)
	bs, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c = joinTwo(a, b, bs)
	sb, err = a.Create(context.Background(), SandboxSpec{Tier: tier.S2})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, bs, c, sb
}

// hostOf is the cluster as host h sees it.
type hostOf struct {
	c *twoHostCluster
	h *Manager
}

func (s hostOf) Blobs() store.Blobs { return s.c.blobs }

func (s hostOf) Publish(ctx context.Context, id, owner string, head addr.Addr, bundle []byte) error {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.bundles[id], s.c.holder[id] = bundle, s.h
	return nil
}

func (s hostOf) Take(ctx context.Context, id, owner string) ([]byte, func(), error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.c.holder[id] == s.h || s.c.holder[id] == nil {
		return nil, func() {}, nil
	}
	return s.c.bundles[id], func() {}, nil
}

func (s hostOf) Trust(ctx context.Context) (key.Trust, error)          { return s.c.trust, nil }
func (s hostOf) Made(context.Context, string, tier.Tier, string) error { return nil }
func (s hostOf) Closed(context.Context, string) error                  { return nil }
func (s hostOf) Claimed(context.Context, string, string) error         { return nil }

// TestSuspensionSharedObjectByObject: in a cluster whose blob store
// keeps objects one by one, a suspension publishes a bundle without any
// blob (its record, seals and runs only) and stores in the cluster's
// store only the objects it lacks; the host that resumes it fetches only
// those it lacks. A sandbox of 8 files of 300 KiB moved from A to B
// (everything fetched), one file rewritten on B, moved back to A: the
// suspension on B stores, and A fetches, only what the rewrite made new.
// A blob in the cluster's store whose bytes are not its name's is
// refused when fetched, naming it, and nothing is placed.
func TestSuspensionSharedObjectByObject(t *testing.T) {
	t.Parallel()
	a, b, bs, c, sb := sharingS2(t)
	ctx := context.Background()
	files := map[string][]byte{}
	for i := range 8 {
		data := make([]byte, 300<<10)
		rand.Read(data)
		name := fmt.Sprintf("f%d", i)
		files[name] = data
		if err := os.WriteFile(filepath.Join(sb.Workspace, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	named := func(h *Manager) []addr.Addr {
		t.Helper()
		rb, err := os.ReadFile(h.RecordPath(sb.ID))
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := chain.Split(rb)
		if err != nil {
			t.Fatal(err)
		}
		blobs, _, err := namedObjects(h.Store, entries)
		if err != nil {
			t.Fatal(err)
		}
		return blobs
	}
	check := func(h *Manager, where string) {
		t.Helper()
		info, err := h.Sandbox(sb.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(info.Workspace, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s on %s: %d bytes, %v; want %d bytes", name, where, len(got), err, len(want))
			}
		}
	}

	// A → B: everything is stored, then fetched.
	if _, err := a.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	first := named(a)
	if len(first) < 9 { // at least the unit, the grants, a tree and chunks
		t.Fatalf("the record names %d blobs", len(first))
	}
	names, _ := tarEntries(t, c.bundles[sb.ID])
	for _, n := range names {
		if strings.HasPrefix(n, "blobs/") {
			t.Fatalf("a cluster's bundle carries %s: %v", n, names)
		}
	}
	for _, x := range first {
		if !bs.HasBlob(x) {
			t.Fatalf("blob %s, which the record names, is not in the cluster's store", x)
		}
	}
	if puts, _ := c.blobs.counts(); puts != len(first) {
		t.Errorf("the first suspension stored %d blobs, want the %d the record names", puts, len(first))
	}
	if _, err := b.Resume(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, gets := c.blobs.counts(); gets != len(first) {
		t.Errorf("B fetched %d blobs, want all %d", gets, len(first))
	}
	check(b, "B")

	// One file rewritten on B; B → A: only what is new travels.
	info, err := b.Sandbox(sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	files["f3"] = make([]byte, 300<<10)
	rand.Read(files["f3"])
	if err := os.WriteFile(filepath.Join(info.Workspace, "f3"), files["f3"], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	had := map[addr.Addr]bool{}
	for _, x := range first {
		had[x] = true
	}
	var fresh []addr.Addr
	for _, x := range named(b) {
		if !had[x] {
			fresh = append(fresh, x)
		}
	}
	if len(fresh) == 0 || len(fresh) >= len(first)/2 {
		t.Fatalf("%d new blobs after rewriting one file of eight (%d before)", len(fresh), len(first))
	}
	if puts, _ := c.blobs.counts(); puts != len(fresh) {
		t.Errorf("the suspension on B stored %d blobs, want the %d new ones", puts, len(fresh))
	}

	// Each new object (chunks and the tree that names them) tampered in
	// the cluster's store in turn: refused as bytes that are not the
	// object's (address), naming it, nothing placed.
	before, _ := os.ReadFile(a.RecordPath(sb.ID))
	for _, victim := range fresh {
		p := filepath.Join(bs.Root(), "blobs", victim.Hex())
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append([]byte("x"), orig...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = a.Resume(ctx, sb.ID, "")
		if err == nil || !strings.Contains(err.Error(), victim.Hex()) || !errors.Is(err, reject.Address) {
			t.Fatalf("blob %s tampered in the cluster's store: %v", victim, err)
		}
		if after, _ := os.ReadFile(a.RecordPath(sb.ID)); !bytes.Equal(after, before) {
			t.Fatal("a refused import changed A's record")
		}
		if a.Store.HasBlob(victim) {
			t.Fatal("a refused import placed the tampered blob")
		}
		if err := os.WriteFile(p, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.blobs.counts()

	// Put right: A fetches only the new blobs, and has the rewrite.
	if _, err := a.Resume(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, gets := c.blobs.counts(); gets != len(fresh) {
		t.Errorf("A fetched %d blobs, want the %d new ones", gets, len(fresh))
	}
	check(a, "A")

	// Without the cluster's store, the bundle is not whole: refused.
	var buf bytes.Buffer
	if _, err := a.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	d, k := newBenchHost(t), key.NewTrust(a.Key.Public(), b.Key.Public())
	t.Cleanup(func() { cleanLive(d) })
	buf.Write(c.bundles[sb.ID])
	if _, err := d.Import(ctx, &buf, host.LocalOwner, k); !errors.Is(err, reject.Missing) {
		t.Fatalf("a cluster's bundle imported without the cluster's store: %v", err)
	}
}

// BenchmarkResumeElsewhere: a suspended sandbox resumed on the other
// host of a two-host cluster whose blob store is a directory both use
// ("dir", as --blobs file:///DIR) or a bucket of a real S3 server
// ("s3", versitygw, as --blobs s3://…), after 1% of its workspace was rewritten on the host that suspended it
// (issue's goal: ≤ 1 s for 1 GiB). Its workspace holds
// SANDBOX_BENCH_MOVE_BYTES of random data (default 64 MiB; 1073741824
// for 1 GiB) in files of ~10.7 MB; each iteration rewrites 1% of it (in
// one file), suspends, and resumes on the other host, which has every
// object but the rewrite's from the move before: resume-ms is the
// resumption there (taking the bundle, fetching the new objects,
// checking the record from genesis, restoring the workspace), fetched
// the objects it fetched and suspend-ms the suspension with its
// publishing.
//
//	SANDBOX_BENCH_MOVE_BYTES=1073741824 go test -run '^$' -bench ResumeElsewhere -benchtime 5x ./internal/live/
func BenchmarkResumeElsewhere(b *testing.B) {
	b.Run("dir", func(b *testing.B) {
		bs, err := store.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		benchResumeElsewhere(b, bs)
	})
	b.Run("s3", func(b *testing.B) {
		g := s3test.Start(b)
		bs, err := s3blobs.New(context.Background(), s3blobs.Config{Endpoint: g.Endpoint, Bucket: g.Bucket(), Region: s3test.Region,
			PathStyle: true, AccessKeyID: s3test.Access, SecretAccessKey: s3test.Secret})
		if err != nil {
			b.Fatal(err)
		}
		benchResumeElsewhere(b, bs)
	})
}

func benchResumeElsewhere(b *testing.B, bs store.Blobs) {
	if os.Geteuid() != 0 {
		b.Skip("live sandboxes' workspaces need root here")
	}
	size := int64(64 << 20)
	if v := os.Getenv("SANDBOX_BENCH_MOVE_BYTES"); v != "" {
		if _, err := fmt.Sscan(v, &size); err != nil || size <= 0 {
			b.Fatalf("SANDBOX_BENCH_MOVE_BYTES=%q: want a positive number of bytes", v)
		}
	}
	hA, hB := newBenchHost(b), newBenchHost(b)
	hosttest.Lease(b, hA.Store)
	hosttest.Lease(b, hB.Store)
	defer hA.Close()
	defer hB.Close()
	c := joinTwo(hA, hB, bs)
	ctx := context.Background()
	sb, err := hA.Create(ctx, SandboxSpec{Tier: tier.S2})
	if err != nil {
		b.Fatal(err)
	}
	const file = (1 << 30) / 100
	buf := make([]byte, file)
	for i, left := 0, size; left > 0; i, left = i+1, left-file {
		n := min(left, file)
		rand.Read(buf[:n])
		if err := os.WriteFile(filepath.Join(sb.Workspace, fmt.Sprintf("f%03d", i)), buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// Once each way first, so that both hosts hold the objects.
	ws := sb.Workspace
	here, there := hA, hB
	move := func() (suspend, resume time.Duration) {
		t0 := time.Now()
		if _, err := here.Suspend(ctx, sb.ID, ""); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		info, err := there.Resume(ctx, sb.ID, "")
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ws, here, there = info.Workspace, there, here
		return t1.Sub(t0), t2.Sub(t1)
	}
	move()
	move()
	c.blobs.counts()
	var sus, res time.Duration
	for b.Loop() {
		n := min(size, file)
		rand.Read(buf[:n])
		if err := os.WriteFile(filepath.Join(ws, "f000"), buf[:n], 0o644); err != nil {
			b.Fatal(err)
		}
		s, r := move()
		sus += s
		res += r
	}
	_, gets := c.blobs.counts()
	b.ReportMetric(float64(res.Milliseconds())/float64(b.N), "resume-ms")
	b.ReportMetric(float64(sus.Milliseconds())/float64(b.N), "suspend-ms")
	b.ReportMetric(float64(gets)/float64(b.N), "fetched")
	b.ReportMetric(float64(size)/(1<<20), "workspace-MiB")
}

// TestAttackObjectsPlantedInSharedStore: whoever can write the cluster's
// blob store puts, before a sandbox is first suspended, other bytes
// under the address of one of its chunks (a chunk's address is a
// well-known file's), a FIFO under another's and a link to /dev/zero
// under a third's. The suspension does not take them for its objects:
// each found there is read back, and what is not whole travels in the
// bundle; the host that resumes it takes the bundle's copies, neither
// hangs on the FIFO nor reads the link, and has the files. (An
// attacker's review found the suspension skipped them and every
// resumption elsewhere was refused for good, or hung.)
func TestAttackObjectsPlantedInSharedStore(t *testing.T) {
	t.Parallel()
	a, b := newHost(t), newHost(t)
	bs, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := a.Create(ctx, SandboxSpec{Tier: tier.S2})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i := range 3 {
		data := make([]byte, 200<<10)
		rand.Read(data)
		files[fmt.Sprintf("f%d", i)] = data
		if err := os.WriteFile(filepath.Join(sb.Workspace, fmt.Sprintf("f%d", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The addresses, learnt the way an attacker would compute them: a
	// suspension here, with no cluster yet.
	if _, err := a.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	rb, _ := os.ReadFile(a.RecordPath(sb.ID))
	entries, _, _ := chain.Split(rb)
	named, _, err := namedObjects(a.Store, entries)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []addr.Addr
	for _, x := range named {
		if b, _ := a.Store.Blob(x); len(b) == 200<<10 {
			chunks = append(chunks, x)
		}
	}
	if len(chunks) != 3 {
		t.Fatalf("%d chunks of the files' size among %d objects", len(chunks), len(named))
	}
	blobDir := filepath.Join(bs.Root(), "blobs")
	os.MkdirAll(blobDir, 0o700)
	if err := os.WriteFile(filepath.Join(blobDir, chunks[0].Hex()), []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(blobDir, chunks[1].Hex()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(blobDir, chunks[2].Hex())); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resume(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	c := joinTwo(a, b, bs)
	if _, err := a.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	names, _ := tarEntries(t, c.bundles[sb.ID])
	var carried []string
	for _, n := range names {
		if strings.HasPrefix(n, "blobs/") {
			carried = append(carried, strings.TrimPrefix(n, "blobs/"))
		}
	}
	if len(carried) != 3 {
		t.Fatalf("the bundle carries %v, want the three planted chunks %v", carried, chunks)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Resume(ctx, sb.ID, "")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("resume on B: %v", err)
		}
	case <-time.After(2 * time.Minute): // a bound on a busy machine, not a measure
		t.Fatal("resume on B hangs on what was planted in the cluster's store")
	}
	info, err := b.Sandbox(sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(info.Workspace, name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s on B: %d bytes, %v", name, len(got), err)
		}
	}
}

// TestJoinWhileSandboxesAreMade: a host joins its cluster while its own
// goroutines (a warm pool filling, the idle fence) tell the cluster of
// what they do: Join is safe beside them (go test -race finds no race;
// the cluster was a plain field set while they read it), and what is
// said after Join reaches the cluster.
func TestJoinWhileSandboxesAreMade(t *testing.T) {
	h := newHost(t)
	bs, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &twoHostCluster{bundles: map[string][]byte{}, holder: map[string]*Manager{}, blobs: &countingBlobs{Blobs: bs}}
	sh := &madeCounter{hostOf: hostOf{c, h}}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			h.shareMade("sb-000000000001", tier.S1, "")
		}
	}()
	h.Join(sh, nil)
	for sh.count() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if h.Shared() != Shared(sh) {
		t.Fatal("the manager's cluster is not the one it joined")
	}
}

// madeCounter counts what it is told was made.
type madeCounter struct {
	hostOf
	mu sync.Mutex
	n  int
}

func (m *madeCounter) Made(context.Context, string, tier.Tier, string) error {
	m.mu.Lock()
	m.n++
	m.mu.Unlock()
	return nil
}

func (m *madeCounter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// TestExportNamesWhatACollectionReads: what a suspension into a
// cluster's store lists as its objects (export's list, which the
// cluster keeps beside the bundle for collections to read) is exactly
// what reading its bundle as an import does finds (BundleObjects), the
// bundle aside: a collection that reads the list keeps what one that
// read the bundle would.
func TestExportNamesWhatACollectionReads(t *testing.T) {
	t.Parallel()
	a, _, bs, c, sb := sharingS2(t)
	ctx := context.Background()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(sb.Workspace, fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 200<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Suspend(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	var bundle bytes.Buffer
	listed, err := a.export(sb.ID, &bundle, c.blobs, 0)
	if err != nil {
		t.Fatal(err)
	}
	ba := addr.Of(bundle.Bytes())
	if err := bs.PutBlob(ba, bundle.Bytes()); err != nil {
		t.Fatal(err)
	}
	read, err := BundleObjects(bs, ba, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[addr.Addr]bool{}
	for _, x := range read {
		if x != ba {
			want[x] = true
		}
	}
	got := map[addr.Addr]bool{}
	for _, x := range listed {
		got[x] = true
	}
	if len(got) != len(want) || len(got) < 5 {
		t.Fatalf("export listed %d objects, reading the bundle finds %d (want the same, at least the unit, grants, a tree and chunks)", len(got), len(want))
	}
	for x := range want {
		if !got[x] {
			t.Fatalf("reading the bundle finds %s, which export did not list", x)
		}
	}
}
