package wasm

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/kv"
)

// broker is the only path from the guest to the host.
type broker struct {
	enf    *grant.Enforcer
	rec    *journal.Writer // live runs record here
	rep    *journal.Reader // replays read here
	kv     *kv.Store
	cancel context.CancelFunc

	mu  sync.Mutex
	err error // the first journal failure; the run is stopped on it

	// Parking (docs/spec/durable-s2.md): every host call the guest makes
	// through the broker is a boundary, counted; a park stops the run at
	// one, and a continuation replays up to it.
	calls   uint64
	parkReq bool
	parked  *executor.Parked // set at the park point: no host effect after it
	cont    *executor.Parked // continuing: the park point still to reach
	live    func()           // called when a continuation reaches it
	mod     api.Module
	fuel    api.Global
	fs      *brokerFS
	// lastMono is the last monotonic reading the guest got: a
	// continuation's clock goes on from it (the parked time is not seen).
	lastMono int64

	// Deterministic stand-ins for ungranted clock and randomness.
	fakeTicks int64
	fakeRand  *mrand.ChaCha8
	start     time.Time
	noted     map[grant.Kind]bool
}

func newBroker(enf *grant.Enforcer, rec *journal.Writer, rep *journal.Reader, seed addr.Addr, cancel context.CancelFunc) *broker {
	return &broker{
		enf: enf, rec: rec, rep: rep, cancel: cancel,
		fakeRand: mrand.NewChaCha8([32]byte(seed)),
		start:    time.Now(),
		noted:    map[grant.Kind]bool{},
	}
}

func (b *broker) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
}

// Err returns the journal failure that stopped the run, if any.
func (b *broker) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// ParkDivergence says a continuation did not reach the state its run was
// parked in: its replay reached the park point with other memory or other
// open files, or ended before it.
type ParkDivergence struct{ Detail string }

func (e *ParkDivergence) Error() string {
	return "the continuation did not reach the parked state: " + e.Detail
}

// requestPark asks the run to park at its next boundary (Control.Park).
// A continuation parks only once it is live again.
func (b *broker) requestPark() {
	b.mu.Lock()
	b.parkReq = true
	b.mu.Unlock()
}

// boundary is called at every host call the guest makes through the
// broker, before the call has any effect: its inputs (journaled or
// deterministic) and its output. It returns false once the run is
// parked: the call then does nothing, and the run is being stopped.
func (b *broker) boundary() bool {
	b.mu.Lock()
	if b.parked != nil {
		b.mu.Unlock()
		return false
	}
	b.calls++
	n, cont, park := b.calls, b.cont, b.parkReq && b.cont == nil && b.mod != nil
	b.mu.Unlock()
	if cont != nil && n == cont.Boundary+1 {
		b.reach(cont)
	}
	if park {
		b.park(n - 1)
		return false
	}
	return true
}

// memory is the guest's linear memory now (a copy).
func (b *broker) memory() []byte {
	m := b.mod.Memory()
	if m == nil {
		return nil
	}
	v, _ := m.Read(0, m.Size())
	return append([]byte(nil), v...)
}

// park stops the run here, after made host calls: what it is now (its
// memory, its open files, its fuel) is kept, nothing the guest does from
// here reaches the host, and the run is cancelled.
func (b *broker) park(made uint64) {
	mem := b.memory()
	p := &executor.Parked{Boundary: made, Memory: mem, MemoryAddr: addr.Of(mem)}
	if b.fuel != nil {
		p.Fuel = b.fuel.Get()
	}
	var err error
	if p.Handles, p.NextHandle, err = b.fs.handles(); err != nil {
		b.fail(fmt.Errorf("park: %w", err))
		return
	}
	b.mu.Lock()
	b.parked = p
	b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
}

// reach is the park point of a continuation: the replay must have made
// the same calls into the same state; from here the run is live.
func (b *broker) reach(c *executor.Parked) {
	fail := func(format string, a ...any) {
		b.fail(&ParkDivergence{Detail: fmt.Sprintf(format, a...)})
	}
	if got := addr.Of(b.memory()); got != c.MemoryAddr {
		fail("at host call %d its memory is %s; parked, it was %s", c.Boundary+1, got, c.MemoryAddr)
		return
	}
	if n := b.rep.Remaining(); n != 0 {
		fail("at host call %d, %d journal entries are still unserved", c.Boundary+1, n)
		return
	}
	if err := b.fs.reattach(c.Handles, c.NextHandle); err != nil {
		fail("%v", err)
		return
	}
	b.mu.Lock()
	b.rep, b.cont = nil, nil
	b.start = time.Now().Add(-time.Duration(b.lastMono))
	b.mu.Unlock()
	if b.live != nil {
		b.live()
	}
}

// Parked returns the park, if the run parked.
func (b *broker) Parked() *executor.Parked {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parked
}

// outWriter is the guest's stdout or stderr: each write is a boundary.
type outWriter struct {
	b *broker
	w io.Writer
}

func (o outWriter) Write(p []byte) (int, error) {
	if !o.b.boundary() || o.w == nil {
		return len(p), nil
	}
	return o.w.Write(p)
}

// do records (live) or replays one nondeterministic input. It returns false
// when the journal failed, or the run parked; the run is then being
// stopped.
func do[R any](b *broker, kind string, req any, live func() R) (R, bool) {
	var r R
	if !b.boundary() {
		return r, false
	}
	if b.rep != nil {
		if err := b.rep.Next(kind, req, &r); err != nil {
			b.fail(err)
			return r, false
		}
		return r, true
	}
	r = live()
	if err := b.rec.Append(kind, req, r); err != nil {
		b.fail(err)
		return r, false
	}
	return r, true
}

// Epoch of the deterministic clock: 2022-01-01T00:00:00Z, as wazero's.
const fakeEpoch = 1640995200

// walltime is the guest's CLOCK_REALTIME.
func (b *broker) walltime() (int64, int32) {
	if b.enf.Clock() != nil {
		if !b.boundary() {
			return 0, 0
		}
		b.mu.Lock()
		b.fakeTicks++
		t := b.fakeTicks
		b.mu.Unlock()
		ns := int64(fakeEpoch)*1e9 + t*1e6 // 1 ms per read
		return ns / 1e9, int32(ns % 1e9)
	}
	ns, ok := do(b, "clock.wall", nil, func() int64 { return time.Now().UnixNano() })
	if !ok {
		return 0, 0
	}
	return ns / 1e9, int32(ns % 1e9)
}

// nanotime is the guest's CLOCK_MONOTONIC.
func (b *broker) nanotime() int64 {
	if b.enf.Clock() != nil {
		if !b.boundary() {
			return 0
		}
		b.mu.Lock()
		b.fakeTicks++
		t := b.fakeTicks
		b.mu.Unlock()
		return t * 1e6
	}
	ns, ok := do(b, "clock.mono", nil, func() int64 { return int64(time.Since(b.start)) })
	if ok {
		b.lastMono = ns
	}
	return ns
}

// nanosleep sleeps for real only when the clock is granted; a deterministic
// guest has no use for wall time passing.
func (b *broker) nanosleep(ns int64) {
	if b.enf.Set().Clock && b.rep == nil && ns > 0 {
		time.Sleep(time.Duration(min(ns, int64(time.Second))))
	}
}

// Read implements io.Reader for random_get.
func (b *broker) Read(p []byte) (int, error) {
	if b.enf.Random() != nil {
		if !b.boundary() {
			return 0, experimentalsys.EIO
		}
		b.mu.Lock()
		b.fakeRand.Read(p)
		b.mu.Unlock()
		return len(p), nil
	}
	got, ok := do(b, "random", len(p), func() []byte {
		buf := make([]byte, len(p))
		if _, err := io.ReadFull(rand.Reader, buf); err != nil {
			return nil
		}
		return buf
	})
	if !ok || len(got) != len(p) {
		return 0, experimentalsys.EIO
	}
	copy(p, got)
	return len(p), nil
}
