package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"fmt"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/journal"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

// An S2 sandbox is suspended mid-exec by parking its execs (seed 000:
// the journal is the run): each stops at its next host-call boundary,
// and what it is there (its journal so far, its linear memory, its open
// files) is kept in the snapshot, whose memory image is the address of
// an S2Park document. Resume continues each: the executor replays the
// journal to the park point, checks it reached the parked memory and
// files, and goes on live; the exec is sealed then, as one run, whose
// output and journal are all of it (docs/spec/durable-s2.md).

// S2ParkType is an S2Park's "sandbox".
const S2ParkType = "sandbox.s2-park/1"

// S2Park is the memory image of a suspended S2 sandbox: its parked execs.
type S2Park struct {
	Sandbox string       `json:"sandbox"` // S2ParkType
	Execs   []ParkedExec `json:"execs"`
}

// ParkedExec is one exec parked at a host-call boundary. Every address
// names a stored object.
type ParkedExec struct {
	// N is its number among the sandbox's execs.
	N int `json:"n"`
	// Unit and Grants are the exec's, which its continuation runs under
	// again: the same unit, to the byte.
	Unit   addr.Addr `json:"unit"`
	Grants addr.Addr `json:"grants"`
	// Workspace is the sandbox's workspace as Grants names it; a
	// continuation finds it where the sandbox's workspace is now.
	Workspace string `json:"workspace,omitempty"`
	// Record is the record head the exec began at, which its
	// attestation cites.
	Record *attest.RecordCite `json:"record,omitempty"`
	// Journal is its journal up to the park point; Boundary the host
	// calls made before it; Memory its linear memory there.
	Journal    addr.Addr         `json:"journal"`
	Boundary   uint64            `json:"boundary"`
	Memory     addr.Addr         `json:"memory"`
	Handles    []executor.Handle `json:"handles"`
	NextHandle uint64            `json:"next_handle"`
	// Fuel is the fuel it had used when it parked.
	Fuel  uint64   `json:"fuel"`
	Notes []string `json:"notes,omitempty"`

	retained int64 // the bytes of its journal and memory
}

// objectsIn are the stored objects a park names (for an export, an
// import), its execs' units read from src.
func (p S2Park) objectsIn(src interface {
	Blob(addr.Addr) ([]byte, error)
}) ([]addr.Addr, error) {
	var out []addr.Addr
	for _, x := range p.Execs {
		ub, err := src.Blob(x.Unit)
		if err != nil {
			return nil, err
		}
		u, err := unit.Decode(ub)
		if err != nil {
			return nil, fmt.Errorf("parked exec %d's unit: %w", x.N, err)
		}
		out = append(out, x.Unit, x.Grants, x.Journal, x.Memory, u.Image)
	}
	return out, nil
}

func (h *Manager) loadPark(a addr.Addr) (S2Park, error) {
	b, err := h.Store.Blob(a)
	var p S2Park
	if err == nil {
		p, err = parsePark(b)
	}
	if err != nil {
		return p, fmt.Errorf("the snapshot's memory image %s: %w", a, err)
	}
	return p, nil
}

// parsePark reads a park document, which may have come in a bundle from
// anyone: canonical JSON of the one type, every address set, every open
// file numbered below next_handle at an absolute, clean path.
func parsePark(b []byte) (S2Park, error) {
	var p S2Park
	if err := jcs.Unmarshal(b, &p); err != nil {
		return p, err
	}
	if p.Sandbox != S2ParkType {
		return p, reject.New(reject.Invalid, "sandbox", "it is %q, not %s", p.Sandbox, S2ParkType)
	}
	if len(p.Execs) == 0 {
		return p, reject.New(reject.Invalid, "execs", "a park of no exec")
	}
	seen := map[int]bool{}
	for i, x := range p.Execs {
		where := fmt.Sprintf("execs[%d]", i)
		switch {
		case x.N <= 0 || seen[x.N]:
			return p, reject.New(reject.Invalid, where+".n", "%d: exec numbers are positive and distinct", x.N)
		case x.Unit.IsZero() || x.Grants.IsZero() || x.Journal.IsZero() || x.Memory.IsZero():
			return p, reject.New(reject.Invalid, where, "unit, grants, journal and memory are addresses")
		case x.Workspace != "" && (!path.IsAbs(x.Workspace) || path.Clean(x.Workspace) != x.Workspace):
			return p, reject.New(reject.Invalid, where+".workspace", "%q is not an absolute, clean path", x.Workspace)
		}
		seen[x.N] = true
		hs := map[uint64]bool{}
		for j, hd := range x.Handles {
			hw := fmt.Sprintf("%s.handles[%d]", where, j)
			switch {
			case hd.H == 0 || hd.H >= x.NextHandle || hs[hd.H]:
				return p, reject.New(reject.Invalid, hw+".h", "%d: handles are distinct, from 1, below next_handle %d", hd.H, x.NextHandle)
			case !path.IsAbs(hd.Path) || path.Clean(hd.Path) != hd.Path:
				return p, reject.New(reject.Invalid, hw+".path", "%q is not an absolute, clean path", hd.Path)
			case hd.Offset < 0 || hd.DirRead < 0:
				return p, reject.New(reject.Invalid, hw, "a negative position")
			}
			hs[hd.H] = true
		}
	}
	return p, nil
}

// ParkWait is how long a suspension waits, by default, for an S2
// sandbox's execs to reach a host-call boundary; an exec that does not
// (a guest computing without a host call) is interrupted, and sealed.
const ParkWait = 10 * time.Second

func (h *Manager) parkWait() time.Duration {
	if h.ParkWait > 0 {
		return h.ParkWait
	}
	return ParkWait
}

// ExecParkedError is what the caller of an exec is told when its
// sandbox was suspended while it ran: it was parked, and is continued,
// and sealed, when the sandbox is resumed.
type ExecParkedError struct {
	ID       string
	N        int
	Boundary uint64
}

func (e *ExecParkedError) Error() string {
	return fmt.Sprintf("exec #%d was parked after %d host calls: sandbox %s was suspended; 'sandbox resume %s' continues it where it stopped, and seals it", e.N, e.Boundary, e.ID, e.ID)
}

// Unavailable: the sandbox is not there to finish it now.
func (e *ExecParkedError) Unavailable() bool { return true }

// inflight is an S2 exec running in a sandbox: how to park it, how to
// stop it.
type inflight struct {
	park   func()
	wanted bool // a park was asked for before the run started
	stop   context.CancelFunc
}

// parkExecs parks every exec running in sb (S2) and waits for them,
// at most ParkWait; those still running are then stopped (and sealed).
func (h *Manager) parkExecs(sb *Sandbox) {
	sb.mu.Lock()
	for x := range sb.inflight {
		x.wanted = true // one still compiling parks as it starts
		if x.park != nil {
			x.park()
		}
	}
	sb.mu.Unlock()
	deadline := time.Now().Add(h.parkWait())
	stopped := false
	for {
		sb.mu.Lock()
		n := sb.running
		if n > 0 && !stopped && time.Now().After(deadline) {
			for x := range sb.inflight {
				x.stop()
			}
			stopped = true
			h.Logger().Warn("execs did not reach a host-call boundary in time: interrupted", "sandbox", sb.ID, "execs", n, "waited", h.parkWait())
		}
		sb.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// keepParked stores what a parked exec is (its journal, its memory, its
// unit and grants) and returns it as the park keeps it.
func (h *Manager) keepParked(n int, pr *host.ParkedRun, workspace string) (ParkedExec, error) {
	jb, ja := pr.Journal, addr.Of(pr.Journal)
	for _, o := range []struct {
		a addr.Addr
		b []byte
	}{{pr.Plan.UnitAddr(), pr.Plan.UnitBytes()}, {pr.Plan.GrantsAddr(), pr.Plan.GrantsBytes()}, {ja, jb}, {pr.Parked.MemoryAddr, pr.Parked.Memory}} {
		if err := h.Store.PutBlob(o.a, o.b); err != nil {
			return ParkedExec{}, err
		}
	}
	return ParkedExec{
		N: n, Unit: pr.Plan.UnitAddr(), Grants: pr.Plan.GrantsAddr(), Workspace: workspace, Record: pr.Plan.Request().Record,
		Journal: ja, Boundary: pr.Parked.Boundary, Memory: pr.Parked.MemoryAddr,
		Handles: pr.Parked.Handles, NextHandle: pr.Parked.NextHandle, Fuel: pr.Parked.Fuel,
		Notes: pr.Plan.Request().Notes, retained: int64(len(jb) + len(pr.Parked.Memory)),
	}, nil
}

// storePark stores the park of sb's parked execs, if any, and says how
// many bytes it retains.
func (h *Manager) storePark(sb *Sandbox) (*addr.Addr, int64, error) {
	sb.mu.Lock()
	execs := append([]ParkedExec(nil), sb.parked...)
	sb.mu.Unlock()
	if len(execs) == 0 {
		return nil, 0, nil
	}
	sort.Slice(execs, func(i, j int) bool { return execs[i].N < execs[j].N })
	b, err := jcs.Marshal(S2Park{Sandbox: S2ParkType, Execs: execs})
	if err != nil {
		return nil, 0, err
	}
	n := int64(len(b))
	for _, x := range execs {
		n += x.retained
	}
	a := addr.Of(b)
	return &a, n, h.Store.PutBlob(a, b)
}

// ContinuedExec is a parked exec a resumption continued: its run, or
// why it could not be, and what it wrote after its park point (at most
// MaxContinuedOutput bytes of each stream; its run's records hold what
// the host's output bound keeps).
type ContinuedExec struct {
	N              int
	Run            *host.Run
	Err            error
	Stdout, Stderr []byte
}

// MaxContinuedOutput bounds what a resumption returns of a continued
// exec's streams.
const MaxContinuedOutput = 16 << 20

// capped keeps at most max bytes.
type capped struct {
	buf []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if n := c.max - len(c.buf); n > 0 {
		c.buf = append(c.buf, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// continueExecs continues the execs a resumed S2 sandbox had parked, at
// once, as they ran, each sealed as the whole run it is; it returns when
// they have all ended, in their order.
func (h *Manager) continueExecs(ctx context.Context, sb *Sandbox, park S2Park) []ContinuedExec {
	out := make([]ContinuedExec, len(park.Execs))
	var wg sync.WaitGroup
	for i, x := range park.Execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ContinuedExec{N: x.N}
			stdout, stderr := &capped{max: MaxContinuedOutput}, &capped{max: MaxContinuedOutput}
			req, cont, err := h.continued(sb, x)
			if err == nil {
				req.Stdout, req.Stderr = stdout, stderr
				c.Run, err = h.execIn(ctx, sb, req, x.N, cont)
			}
			if err != nil {
				c.Err = fmt.Errorf("continue exec #%d: %w", x.N, err)
				h.Logger().Warn("a parked exec was not continued", "sandbox", sb.ID, "exec", x.N, "err", err)
			}
			c.Stdout, c.Stderr = stdout.buf, stderr.buf
			out[i] = c
		}()
	}
	wg.Wait()
	return out
}

// continued rebuilds a parked exec's request from what was stored.
func (h *Manager) continued(sb *Sandbox, x ParkedExec) (host.Request, *host.Continuation, error) {
	ub, err := h.Store.Blob(x.Unit)
	if err != nil {
		return host.Request{}, nil, err
	}
	u, err := unit.Decode(ub)
	if err != nil {
		return host.Request{}, nil, fmt.Errorf("its unit: %w", err)
	}
	gb, err := h.Store.Blob(x.Grants)
	if err != nil {
		return host.Request{}, nil, err
	}
	g, err := grant.Decode(gb)
	if err != nil {
		return host.Request{}, nil, fmt.Errorf("its grants: %w", err)
	}
	// They must be the sandbox's, its workspace where the unit names
	// it: a park cannot bring grants the record does not give.
	want := sb.Grants.Clone()
	want.Storage = nil
	for _, s := range sb.Grants.Storage {
		if s.Path == sb.Workspace && x.Workspace != "" {
			s.Path = x.Workspace
		}
		want.Storage = append(want.Storage, s)
	}
	if err := want.Normalize(); err != nil {
		return host.Request{}, nil, err
	}
	if want, err = host.WithDefaultCPU(want, tier.Wasm); err != nil { // as Command gave the exec
		return host.Request{}, nil, err
	}
	if _, wa, err := want.Canonical(); err != nil || wa != x.Grants {
		return host.Request{}, nil, reject.New(reject.Splice, "park", "exec #%d's grants (%s) are not the sandbox's (%s)", x.N, x.Grants, wa)
	}
	image, err := h.Store.Blob(u.Image)
	if err != nil {
		return host.Request{}, nil, err
	}
	jb, err := h.Store.Blob(x.Journal)
	if err != nil {
		return host.Request{}, nil, err
	}
	entries, _, err := journal.Parse(jb)
	if err != nil {
		return host.Request{}, nil, fmt.Errorf("its journal: %w", err)
	}
	if _, err := h.Store.Blob(x.Memory); err != nil {
		return host.Request{}, nil, fmt.Errorf("its memory: %w", err)
	}
	if u.Kind != tier.Wasm {
		return host.Request{}, nil, fmt.Errorf("its unit is %s, not a WebAssembly module", u.Kind)
	}
	t := tier.S2
	lim := u.Limits
	lim.DeadlineMS = 0
	req := host.Request{
		Kind: u.Kind, Image: image, Entry: u.Entry, Args: u.Args, Env: u.Env, Devices: u.Devices, Dir: u.Dir,
		Grants: g, Tier: &t, Limits: lim, Deadline: time.Duration(u.Limits.DeadlineMS) * time.Millisecond,
		Record: x.Record,
		Notes:  append(append([]string(nil), x.Notes...), fmt.Sprintf("parked after %d host calls when sandbox %s was suspended; continued after its resumption by replaying its journal to that point, where its memory and open files were checked against the parked ones: its output and journal are all of it, and its receipt counts the replay", x.Boundary, sb.ID)),
	}
	c := &host.Continuation{
		Parked:  &executor.Parked{Boundary: x.Boundary, MemoryAddr: x.Memory, Handles: x.Handles, NextHandle: x.NextHandle, Fuel: x.Fuel},
		Entries: entries, Unit: x.Unit, Workspace: x.Workspace,
	}
	if x.Workspace != "" && sb.Workspace != "" && x.Workspace != sb.Workspace {
		c.Remap = map[string]string{x.Workspace: sb.Workspace}
	}
	return req, c, nil
}

// ParkRunning suspends every live S2 sandbox that has execs running, so
// that they are parked, not interrupted: a service that stops calls it
// before it interrupts what is left.
func (h *Manager) ParkRunning() {
	h.sandboxes.mu.Lock()
	var busy []*Sandbox
	for _, sb := range h.sandboxes.m {
		sb.mu.Lock()
		if sb.Tier == tier.S2 && sb.running > 0 && sb.record != nil {
			busy = append(busy, sb)
		}
		sb.mu.Unlock()
	}
	h.sandboxes.mu.Unlock()
	for _, sb := range busy {
		if _, err := h.Suspend(context.Background(), sb.ID, sb.Owner); err != nil {
			h.Logger().Warn("a busy S2 sandbox could not be suspended: its execs will be interrupted", "sandbox", sb.ID, "err", err)
		}
	}
}
