package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/internal/note"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/reject"
)

// A fleet is N items of one command, each input its last argument, each
// a sealed run of its own, run by a pool of workers in this process;
// its aggregate (internal/fleet) is kept in STATE/fleets/ID: items.jsonl
// (each item's canonical JSON, in index order) and checkpoint (the
// signed tlog checkpoint of all of them). While it runs, each time the
// items done from index 0 without a gap pass another CheckpointEvery,
// that prefix is published (items.jsonl and checkpoints/SIZE): a watcher
// pins it, and a later checkpoint must be consistent with it (an RFC
// 6962 log-size proof), so no finished item is changed afterwards.

// FleetSpec is a fleet to run: one unit over N inputs (Command, each
// input appended to its arguments), or N units (Units, each a command
// line of its own; Command gives their environment, grants and
// directory, and no arguments).
type FleetSpec struct {
	// Owner is the principal the fleet runs for ("": the operator):
	// each item is checked against its authority as a run is.
	Owner   string
	Command CommandLine // the command; each input is appended to its arguments
	Inputs  []string
	Units   [][]string
	Workers int
	// Progress is told each item's end (done of total), one call at a
	// time, done rising (to total when every item ran); nil: nothing.
	Progress func(done, total int)
	// CheckpointEvery is how many more items the done prefix must hold
	// for another intermediate checkpoint; 0: a tenth of the fleet
	// (at least 1), negative: none.
	CheckpointEvery int
	// Dispatch runs item i of fleet id (its request) somewhere and says
	// which sealed run it became (a cluster's queue: any host may run
	// it); nil: this host runs it.
	Dispatch func(ctx context.Context, id string, i int, req Request) (ItemRun, error)
}

// ItemRun is the sealed run a fleet's item became, wherever it ran.
type ItemRun struct {
	Run      addr.Addr
	ExitCode *int // nil: it did not exit (killed, out of budget)
}

// FleetResult is a fleet that ran.
type FleetResult struct {
	ID         string
	Dir        string
	Items      []fleet.Item
	Checkpoint string
	Failed     int // items whose guest did not exit 0 (still sealed)
}

// FleetKeyName is the name a host signs its fleets' checkpoints under.
func (h *Host) FleetKeyName() string { return "sandbox/" + h.Key.Public().ID().Short() }

// FleetVerifier is this host's verifier key for checkpoints.
func (h *Host) FleetVerifier() (string, error) {
	return note.VerifierKey(h.FleetKeyName(), h.Key.Public())
}

// RunFleet runs a fleet to its end and seals its aggregate. An item that
// cannot be sealed ends the fleet with an error naming it; an item whose
// guest fails is sealed as it ended and counted.
func (h *Host) RunFleet(ctx context.Context, spec FleetSpec) (*FleetResult, error) {
	if len(spec.Units) > 0 {
		if len(spec.Inputs) > 0 || len(spec.Command.Args) > 0 {
			return nil, &InvalidError{Err: errors.New("a fleet is one command over inputs, or units each with its own command line: not both")}
		}
		// An item's input is its command line, as canonical JSON.
		spec.Inputs = make([]string, len(spec.Units))
		for i, u := range spec.Units {
			if len(u) == 0 {
				return nil, &InvalidError{Err: fmt.Errorf("fleet unit %d: an empty command line", i)}
			}
			b, err := jcs.Marshal(u)
			if err != nil {
				return nil, &InvalidError{Err: fmt.Errorf("fleet unit %d: %w", i, err)}
			}
			spec.Inputs[i] = string(b)
		}
	}
	if len(spec.Inputs) == 0 {
		return nil, &InvalidError{Err: errors.New("a fleet of no items")}
	}
	workers := max(1, spec.Workers)
	var id [6]byte
	rand.Read(id[:])
	res := &FleetResult{ID: "fl-" + hex.EncodeToString(id[:]), Items: make([]fleet.Item, len(spec.Inputs))}
	res.Dir = h.Store.Path("fleets", res.ID)
	if err := os.MkdirAll(filepath.Join(res.Dir, "checkpoints"), 0o700); err != nil {
		return nil, err
	}
	every := spec.CheckpointEvery
	if every == 0 {
		every = max(1, len(spec.Inputs)/10)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done, failed atomic.Int64
		// progressMu orders the Progress calls; reported is the last count told.
		progressMu        sync.Mutex
		reported          int64
		mu                sync.Mutex
		firstErr          error
		wg                sync.WaitGroup
		finished          = make([]bool, len(spec.Inputs))
		prefix, published int
		pubMu             sync.Mutex // one publication at a time, in order
	)
	// publish writes the done prefix and its checkpoint, when it has
	// grown by every since the last.
	publish := func() error {
		pubMu.Lock()
		defer pubMu.Unlock()
		mu.Lock()
		for prefix < len(finished) && finished[prefix] {
			prefix++
		}
		n := prefix
		items := append([]fleet.Item(nil), res.Items[:n]...)
		mu.Unlock()
		if every < 0 || n == len(finished) || n-published < every {
			return nil
		}
		if _, err := h.writeFleet(res.Dir, res.ID, items, filepath.Join("checkpoints", strconv.Itoa(n))); err != nil {
			return err
		}
		published = n
		return nil
	}
	for range min(workers, len(spec.Inputs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(spec.Inputs) || ctx.Err() != nil {
					return
				}
				c := spec.Command
				if spec.Units != nil {
					c.Args = append([]string(nil), spec.Units[i]...)
				} else {
					c.Args = append(append([]string(nil), c.Args...), spec.Inputs[i])
				}
				req, err := Command(c)
				var r ItemRun
				if err == nil {
					req.Notes = []string{fmt.Sprintf("item %d of fleet %s", i, res.ID)}
					req.Owner = spec.Owner
					r, err = h.runItem(ctx, spec.Dispatch, res.ID, i, req)
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("fleet %s, item %d (%q): %w", res.ID, i, spec.Inputs[i], err)
					}
					mu.Unlock()
					cancel()
					return
				}
				if c := r.ExitCode; c == nil || *c != 0 {
					failed.Add(1)
				}
				mu.Lock()
				res.Items[i] = fleet.Item{Index: uint64(i), Input: addr.Of([]byte(spec.Inputs[i])), Run: r.Run}
				finished[i] = true
				mu.Unlock()
				if err := publish(); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("fleet %s: an intermediate checkpoint: %w", res.ID, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				if d := done.Add(1); spec.Progress != nil {
					// In order, never backwards: a worker that counted
					// an earlier item may come here after one that
					// counted a later one; its count is then old news.
					progressMu.Lock()
					if d > reported {
						reported = d
						spec.Progress(int(d), len(spec.Inputs))
					}
					progressMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Failed = int(failed.Load())
	cp, err := h.writeFleet(res.Dir, res.ID, res.Items, "checkpoint")
	if err != nil {
		return nil, err
	}
	res.Checkpoint = cp
	return res, nil
}

// runItem runs one item's request: through dispatch, or here.
func (h *Host) runItem(ctx context.Context, dispatch func(context.Context, string, int, Request) (ItemRun, error), id string, i int, req Request) (ItemRun, error) {
	if dispatch != nil {
		return dispatch(ctx, id, i, req)
	}
	return h.RunHere(ctx, req)
}

// RunHere runs an item's request on this host.
func (h *Host) RunHere(ctx context.Context, req Request) (ItemRun, error) {
	r, err := h.Run(ctx, req)
	if err != nil {
		return ItemRun{}, err
	}
	return ItemRun{Run: r.ID, ExitCode: r.Result.Outcome.ExitCode}, nil
}

// writeFleet writes items (a prefix of the fleet, or all of it) as
// items.jsonl, then their signed checkpoint as name: a checkpoint is
// never there without the items that make it.
func (h *Host) writeFleet(dir, id string, items []fleet.Item, name string) (string, error) {
	f, err := fleet.New("sandbox/fleet/"+id, items)
	if err != nil {
		return "", err
	}
	cp, err := f.Checkpoint(len(items), h.FleetKeyName(), h.Key)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	for _, it := range items {
		line, err := jcs.Marshal(it)
		if err != nil {
			return "", err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := safefile.Write(filepath.Join(dir, "items.jsonl"), b.Bytes(), 0o600); err != nil {
		return "", err
	}
	return cp, safefile.Write(filepath.Join(dir, name), []byte(cp), 0o600)
}

// FleetCheckpoints are the sizes of a fleet directory's intermediate
// checkpoints, smallest first.
func FleetCheckpoints(dir string) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "checkpoints"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// LoadFleet reads a fleet directory: its items (each line canonical, in
// index order) into their tree, under the origin its checkpoint names,
// and the checkpoint's bytes (not yet verified).
func LoadFleet(dir string) (*fleet.Fleet, []byte, error) {
	cp, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "items.jsonl"))
	if err != nil {
		return nil, nil, err
	}
	var items []fleet.Item
	for n, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var it fleet.Item
		if err := jcs.Unmarshal(line, &it); err != nil {
			return nil, nil, fmt.Errorf("%s line %d: %w", filepath.Join(dir, "items.jsonl"), n+1, err)
		}
		items = append(items, it)
	}
	origin, _, _ := bytes.Cut(cp, []byte("\n"))
	f, err := fleet.New(string(origin), items)
	if err != nil {
		return nil, nil, reject.In(filepath.Join(dir, "items.jsonl"), err)
	}
	return f, cp, nil
}
