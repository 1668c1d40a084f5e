package wasm

import (
	"context"
	"crypto/rand"
	"io"
	mrand "math/rand/v2"
	"sync"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"

	"github.com/opensubstrate/sandbox/addr"
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

// do records (live) or replays one nondeterministic input. It returns false
// when the journal failed; the run is then being stopped.
func do[R any](b *broker, kind string, req any, live func() R) (R, bool) {
	var r R
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
		b.mu.Lock()
		b.fakeTicks++
		t := b.fakeTicks
		b.mu.Unlock()
		return t * 1e6
	}
	ns, _ := do(b, "clock.mono", nil, func() int64 { return int64(time.Since(b.start)) })
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
