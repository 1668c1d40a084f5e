package live

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
	"github.com/opensubstrate/sandbox/verify"
)

// A fleet's items travel (docs/cluster.md): the host a fleet runs on
// queues each item's request, made and checked there (its program or
// module read, its grants within its owner's authority); any host of the
// cluster may take it, run it sealed under its own key and hand back the
// run's directory; the fleet's host checks that run whole, signed by a
// host of the cluster, before it counts it. The item's leaf in the
// fleet's tree is the same whichever host ran it: its index, its input
// and the run's address.

// ItemType is a fleet item's "type"; ItemResultType its result's.
const (
	ItemType       = "sandbox.fleet-item/1"
	ItemResultType = "sandbox.fleet-item-result/1"
	// MaxItemBytes bounds an item's payload (its program or module
	// travels in it).
	MaxItemBytes = 64 << 20
	// maxRunFiles bounds the files of one run's directory a host hands
	// back.
	maxRunFiles = 64
)

// FleetItem is a fleet item's request as it travels between hosts.
type FleetItem struct {
	Type       string            `json:"type"` // ItemType
	Fleet      string            `json:"fleet"`
	Index      int               `json:"index"`
	Owner      string            `json:"owner,omitempty"`
	Kind       tier.Kind         `json:"kind"`
	Image      []byte            `json:"image"`
	Entry      string            `json:"entry"`
	Args       []string          `json:"args"`
	Env        map[string]string `json:"env,omitempty"`
	Devices    []device.Class    `json:"devices,omitempty"`
	Grants     json.RawMessage   `json:"grants"` // the grant set's canonical JSON
	Tier       *tier.Tier        `json:"tier,omitempty"`
	Escalate   bool              `json:"escalate,omitempty"`
	DeadlineMS int64             `json:"deadline_ms,omitempty"`
	Limits     unit.Limits       `json:"limits"`
	Dir        string            `json:"dir,omitempty"`
	Notes      []string          `json:"notes,omitempty"`
}

// ItemResult is what the host that ran an item hands back: the sealed
// run's address, how it ended, and its directory's bundle in the
// cluster's blob store.
type ItemResult struct {
	Type     string    `json:"type"` // ItemResultType
	Run      addr.Addr `json:"run"`
	ExitCode *int      `json:"exit_code"`
	Bundle   addr.Addr `json:"bundle"`
}

// ItemOf is item i of fleet id as it travels, its owner with it: each
// host holds the owner to its own policy for that principal (give the
// cluster's hosts the same token file). What only this host has (an
// image root, standard input, a record it continues, a JCP
// presentation) is refused: such a fleet runs here.
func ItemOf(id string, i int, req host.Request) ([]byte, error) {
	switch {
	case !req.Root.IsZero():
		return nil, fmt.Errorf("fleet item %d: an image root is this host's: the fleet runs here", i)
	case req.Stdin != nil || req.Record != nil || req.JCP != nil:
		return nil, fmt.Errorf("fleet item %d: standard input, a record or a JCP chain does not travel", i)
	}
	g, _, err := req.Grants.Canonical()
	if err != nil {
		return nil, fmt.Errorf("fleet item %d: its grants: %w", i, err)
	}
	b, err := json.Marshal(FleetItem{Type: ItemType, Fleet: id, Index: i, Owner: req.Owner, Kind: req.Kind, Image: req.Image,
		Entry: req.Entry, Args: req.Args, Env: req.Env, Devices: req.Devices, Grants: g, Tier: req.Tier, Escalate: req.Escalate,
		DeadlineMS: req.Deadline.Milliseconds(), Limits: req.Limits, Dir: req.Dir, Notes: req.Notes})
	if err == nil && len(b) > MaxItemBytes {
		err = fmt.Errorf("fleet item %d: %d bytes, over %d (its program or module travels in it)", i, len(b), MaxItemBytes)
	}
	return b, err
}

// ParseItem reads a fleet item's payload: hostile bytes, though signed
// by a host of the cluster. Errors name the field.
func ParseItem(b []byte) (*FleetItem, error) {
	if len(b) > MaxItemBytes {
		return nil, reject.New(reject.Invalid, "fleet item", "%d bytes, over %d", len(b), MaxItemBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var it FleetItem
	if err := d.Decode(&it); err != nil {
		return nil, reject.Wrap(reject.Malformed, "fleet item", err)
	}
	if d.More() {
		return nil, reject.New(reject.Malformed, "fleet item", "more after the object")
	}
	switch {
	case it.Type != ItemType:
		return nil, reject.New(reject.Unrecognised, "fleet item.type", "%q, want %q", it.Type, ItemType)
	case it.Index < 0:
		return nil, reject.New(reject.Invalid, "fleet item.index", "%d", it.Index)
	case it.Fleet == "":
		return nil, reject.New(reject.MissingField, "fleet item.fleet", "the fleet it is an item of")
	case len(it.Args) == 0 || it.Entry == "":
		return nil, reject.New(reject.MissingField, "fleet item.args", "a command line and its entry")
	case it.DeadlineMS < 0:
		return nil, reject.New(reject.Invalid, "fleet item.deadline_ms", "%d", it.DeadlineMS)
	case len(it.Grants) == 0:
		return nil, reject.New(reject.MissingField, "fleet item.grants", "its grant set")
	}
	return &it, nil
}

// RunItem runs a fleet item another host queued (payload, ParseItem's)
// here, sealed under this host's key, and returns its result (Bundle
// left for the caller, who keeps it) and its run directory's bundle.
// The item's owner (the queuing host vouches for it) is held to this
// host's authority as any run's is.
func (h *Manager) RunItem(ctx context.Context, payload []byte) (ItemResult, []byte, error) {
	it, err := ParseItem(payload)
	if err != nil {
		return ItemResult{}, nil, err
	}
	g, err := grant.Decode(it.Grants)
	if err != nil {
		return ItemResult{}, nil, reject.In("fleet item.grants", err)
	}
	r, err := h.Run(ctx, host.Request{Owner: it.Owner, Kind: it.Kind, Image: it.Image, Entry: it.Entry, Args: it.Args, Env: it.Env,
		Devices: it.Devices, Grants: g, Tier: it.Tier, Escalate: it.Escalate, Deadline: time.Duration(it.DeadlineMS) * time.Millisecond,
		Limits: it.Limits, Dir: it.Dir, Notes: it.Notes})
	if err != nil {
		return ItemResult{}, nil, err
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := h.putRun(tarPut(tw), r.ID); err != nil {
		return ItemResult{}, nil, fmt.Errorf("run %s: %w", r.ID, err)
	}
	if err := tw.Close(); err != nil {
		return ItemResult{}, nil, err
	}
	return ItemResult{Type: ItemResultType, Run: r.ID, ExitCode: r.Result.Outcome.ExitCode}, b.Bytes(), nil
}

// ImportRun reads run want's directory from a bundle another host
// handed back (hostile bytes) and keeps it here: only that run's
// regular files, its attestation the one its address names, signed by a
// key trust holds, every record it binds whole. A run already here is
// left as it is. It returns the run's exit status, as its attestation
// says (nil: it did not exit).
func (h *Manager) ImportRun(r io.Reader, want addr.Addr, trust key.Trust) (*int, error) {
	if err := h.importRun(r, want, trust); err != nil {
		return nil, err
	}
	row := store.RowOf(h.Store.Path("runs", want.Hex()), want)
	if row == nil {
		return nil, fmt.Errorf("run %s: kept, but its attestation cannot be read back", want)
	}
	return row.Exit, nil
}

func (h *Manager) importRun(r io.Reader, want addr.Addr, trust key.Trust) error {
	final := h.Store.Path("runs", want.Hex())
	if _, err := os.Stat(final); err == nil {
		return nil
	}
	runs := h.Store.Path("runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return err
	}
	var (
		stage string
		err   error
	)
	if namer := h.Store.Namer(); namer != nil {
		stage, err = state.MkdirNamed(runs, ".partial-import", namer)
	} else {
		stage, err = os.MkdirTemp(runs, ".partial-import-")
	}
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return reject.Wrap(reject.Malformed, "run bundle", err)
		}
		where := "run bundle: " + hd.Name
		m := runName.FindStringSubmatch(hd.Name)
		switch {
		case n >= maxRunFiles:
			return reject.New(reject.Invalid, "run bundle", "more than %d files", maxRunFiles)
		case hd.Typeflag != tar.TypeReg || m == nil || hd.Size < 0 || hd.Size > MaxBundleFile:
			return reject.New(reject.Invalid, where, "only runs/HEX/NAME, regular files of at most %d bytes", MaxBundleFile)
		case m[1] != want.Hex():
			return reject.New(reject.Invalid, where, "not a file of run %s", want)
		}
		p := filepath.Join(stage, m[2])
		if _, err := os.Lstat(p); err == nil {
			return reject.New(reject.Invalid, where, "twice")
		}
		if _, err := stageFile(tr, hd.Size, p, where); err != nil {
			return err
		}
	}
	env, err := os.ReadFile(filepath.Join(stage, verify.FileAttestation))
	if errors.Is(err, os.ErrNotExist) {
		return reject.New(reject.Missing, "run bundle", "no %s", verify.FileAttestation)
	}
	if err != nil {
		return err
	}
	at, err := attest.Verify(env, trust)
	if err != nil {
		return fmt.Errorf("run bundle: run %s: %w", want, err)
	}
	if at.Addr != want {
		return reject.New(reject.Address, "run bundle", "its attestation is %s, not %s", at.Addr, want)
	}
	v := &verify.Verifier{Trust: trust}
	for _, res := range v.Path(stage) {
		if res.Err != nil {
			return reject.In(fmt.Sprintf("run bundle: run %s: %s", want, filepath.Base(res.Path)), res.Err)
		}
	}
	if err := safefile.SyncDir(stage); err != nil {
		return err
	}
	row := store.RowOf(stage, want)
	h.Store.IndexBefore(row)
	if err := os.Rename(stage, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another import of it came first
		}
		return err
	}
	h.Store.IndexAfter(row)
	return safefile.SyncDir(runs)
}

// Queue is a cluster's work queue, as a fleet's host uses it.
type Queue interface {
	// RunItem queues payload (ItemOf's) for any host of the cluster and
	// waits until one ran it: its result and its run directory's
	// bundle, as that host handed them back, and kept, to be called
	// once the run is kept here (the cluster may then collect the
	// bundle).
	RunItem(ctx context.Context, payload []byte) (res ItemResult, bundle []byte, kept func(), err error)
}

// RunFleet runs a fleet (host.RunFleet); with a Queue, each item that
// travels (ItemOf) runs on whichever host of the cluster takes it, and
// its run is brought here, checked under the keys of the cluster's
// hosts, before it counts.
func (h *Manager) RunFleet(ctx context.Context, spec host.FleetSpec) (*host.FleetResult, error) {
	if h.queue() != nil && h.Shared() != nil && spec.Dispatch == nil {
		spec.Dispatch = h.dispatchItem
	}
	return h.Host.RunFleet(ctx, spec)
}

// dispatchItem runs item i of fleet id through the queue: an item that
// does not travel runs here.
func (h *Manager) dispatchItem(ctx context.Context, id string, i int, req host.Request) (host.ItemRun, error) {
	p, err := ItemOf(id, i, req)
	if err != nil {
		h.Logger().Info("a fleet item runs here", "fleet", id, "item", i, "why", err)
		return h.RunHere(ctx, req)
	}
	res, bundle, kept, err := h.queue().RunItem(ctx, p)
	if err != nil {
		return host.ItemRun{}, err
	}
	trust, err := h.Shared().Trust(ctx)
	if err != nil {
		return host.ItemRun{}, err
	}
	trust.Add(h.Key.Public())
	// How it ended is the run's own word, checked, not the result's.
	exit, err := h.ImportRun(bytes.NewReader(bundle), res.Run, trust)
	if err != nil {
		return host.ItemRun{}, fmt.Errorf("fleet %s item %d: the run handed back: %w", id, i, err)
	}
	kept()
	return host.ItemRun{Run: res.Run, ExitCode: exit}, nil
}

// ParseItemResult reads what the host that ran an item handed back
// (hostile bytes: only its run's address and its bundle's are used, and
// both are checked when the bundle is read).
func ParseItemResult(b []byte) (ItemResult, error) {
	var r ItemResult
	if len(b) > 1<<16 {
		return r, reject.New(reject.Invalid, "fleet item result", "%d bytes", len(b))
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return r, reject.Wrap(reject.Malformed, "fleet item result", err)
	}
	switch {
	case d.More():
		return r, reject.New(reject.Malformed, "fleet item result", "more after the object")
	case r.Type != ItemResultType:
		return r, reject.New(reject.Unrecognised, "fleet item result.type", "%q, want %q", r.Type, ItemResultType)
	case r.Run.IsZero() || r.Bundle.IsZero():
		return r, reject.New(reject.MissingField, "fleet item result", "its run and its bundle")
	}
	return r, nil
}
