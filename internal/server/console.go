package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/chain"
	"github.com/opensubstrate/sandbox/internal/console"
	"github.com/opensubstrate/sandbox/internal/fleet"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/internal/safefile"
	"github.com/opensubstrate/sandbox/record"
)

// The web console (docs/console.md): its page, and the few read-only
// views it needs that the API has no operation for (a caller's runs, a
// record's lines and seals, a fleet item's proof). The views answer as
// the API does, for the caller the bearer token names and only with
// what that caller may see; they are the console's, not the API's (the
// clients are held to docs/openapi.json, which does not list them).

// Bounds on the console's views.
const (
	consoleRunsDefault = 200
	consoleRunsMax     = 2000
)

// fleetOwnerFile, in a fleet's directory, names the principal that ran
// it through the service (absent: the host's own user).
const fleetOwnerFile = "owner"

// WithConsole serves the console beside api (the TCP API, behind its
// token check): the page's files at /ui/, which hold no data and need
// no token (a browser cannot send one when it opens a page), and the
// console's views at /ui/api/, behind the same token check as api.
func (s *Server) WithConsole(api http.Handler) http.Handler {
	s.init()
	views := http.NewServeMux()
	views.HandleFunc("GET /ui/api/runs", s.consoleRuns)
	views.HandleFunc("GET /ui/api/records/{id}", s.consoleRecord)
	views.HandleFunc("GET /ui/api/fleets", s.consoleFleets)
	views.HandleFunc("GET /ui/api/fleets/{id}/items/{n}", s.consoleFleetItem)
	views.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, fmt.Errorf("%s %s: no such view of the console: %w", r.Method, r.URL.Path, os.ErrNotExist))
	})
	mux := http.NewServeMux()
	mux.Handle("/ui/api/", s.TCP(s.logged(console.Private(views))))
	mux.Handle("/ui/", s.logged(console.Handler("/ui/")))
	mux.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("/", api)
	return mux
}

// consoleRuns lists the caller's sealed runs, newest first, as GET
// /v1/runs/{id} reports each: at most ?limit= (200; up to 2000).
func (s *Server) consoleRuns(w http.ResponseWriter, r *http.Request) {
	limit := consoleRunsDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > consoleRunsMax {
			writeErr(w, badRequest(fmt.Sprintf("query parameter \"limit\": want 1 to %d", consoleRunsMax)))
			return
		}
		limit = n
	}
	ids, err := s.runsOf(owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	// Newest first by when the run's directory was made; the figures
	// then come from each run, as GET /v1/runs/{id} gives them.
	type cand struct {
		id  addr.Addr
		mod time.Time
	}
	var cs []cand
	for _, a := range ids {
		fi, err := os.Stat(s.Live.Store.Path("runs", a.Hex()))
		if err != nil {
			continue
		}
		cs = append(cs, cand{a, fi.ModTime()})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].mod.After(cs[j].mod) })
	out := []client.RunReport{}
	for _, c := range cs[:min(limit, len(cs))] {
		v, err := s.Live.RunFor(owner(r), c.id.String())
		if err != nil {
			continue // gone meanwhile, or not the caller's after all
		}
		out = append(out, reportOf(v))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started > out[j].Started })
	writeJSON(w, 200, out)
}

// runsOf is every run owner may see: the host's own user all of them;
// a token the runs its sandboxes' records cite and those it made
// through the service (live.Manager.RunFor, which each is shown
// through, checks it again).
func (s *Server) runsOf(o string) ([]addr.Addr, error) {
	seen := map[addr.Addr]bool{}
	var out []addr.Addr
	add := func(a addr.Addr) {
		if !a.IsZero() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if o == host.LocalOwner {
		ents, err := os.ReadDir(s.Live.Store.Path("runs"))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if a, err := addr.Parse("b3:" + e.Name()); err == nil && e.IsDir() {
				add(a)
			}
		}
		return out, nil
	}
	recs, err := s.Live.Records(o)
	if err != nil {
		return nil, err
	}
	for _, ri := range recs {
		entries, _, err := chain.Read(s.Live.RecordPath(ri.ID))
		if err != nil || len(entries) == 0 {
			continue
		}
		for _, e := range entries[1:] {
			if seg, err := record.ParseSegment(e); err == nil && seg.Kind == record.Executed {
				add(seg.Attestation)
			}
		}
	}
	// The runs the service noted as the caller's (live.Manager.NoteOwner:
	// STATE/owners/HEX holds the owner).
	ents, err := os.ReadDir(s.Live.Store.Path("owners"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		a, err := addr.Parse("b3:" + e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(s.Live.Store.Path("owners", e.Name())); err == nil && string(b) == o {
			add(a)
		}
	}
	return out, nil
}

// reportOf is a run as GET /v1/runs/{id} reports it (durable.go's
// runReport), and the console's list of runs each.
func reportOf(v *live.RunView) client.RunReport {
	out := client.RunReport{Run: v.ID.String(), Verified: v.Verified, Problems: v.Problems}
	if a := v.Attestation; a != nil {
		c := a.Claim
		out.Signer, out.Unit, out.Started, out.Ended, out.Notes = c.Signer.String(), c.Unit.String(), c.Started, c.Ended, c.Notes
		out.Outcome = &client.Outcome{Status: string(c.Outcome.Status), ExitCode: c.Outcome.ExitCode, Detail: c.Outcome.Detail}
	}
	if v.Receipt != nil {
		out.Energy = EnergyOf(v.Receipt)
	}
	return out
}

// ConsoleRecord is a run record as the console draws and checks it:
// its lines and its seals exactly as stored (each without its newline).
type ConsoleRecord struct {
	ID      string   `json:"id"`
	Entries []string `json:"entries"`
	Seals   []string `json:"seals"`
}

// consoleRecord serves one of the caller's records, its lines and seals
// as they are stored: the page recomputes its heads and checks its
// seals itself.
func (s *Server) consoleRecord(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	recs, err := s.Live.Records(owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	if !slices.ContainsFunc(recs, func(ri live.RecordInfo) bool { return ri.ID == id }) {
		writeErr(w, fmt.Errorf("record %q: %w", id, os.ErrNotExist))
		return
	}
	path := s.Live.RecordPath(id)
	var entries, seals [][]byte
	// A host seals each entry just after appending it: read again, a
	// few times, rather than show an entry a moment before its seal.
	for try := 0; try < 5; try++ {
		if entries, _, err = chain.Read(path); err == nil {
			seals, err = record.ReadSeals(path)
		}
		if err != nil {
			writeErr(w, fmt.Errorf("record %s: %w", id, err))
			return
		}
		if len(seals) == len(entries) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := ConsoleRecord{ID: id, Entries: []string{}, Seals: []string{}}
	for _, e := range entries {
		out.Entries = append(out.Entries, string(e))
	}
	for _, e := range seals {
		out.Seals = append(out.Seals, string(e))
	}
	writeJSON(w, 200, out)
}

// ConsoleFleet is a fleet as the console lists it.
type ConsoleFleet struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
	// Checkpoint is its final signed checkpoint, as written; empty while
	// it runs (or where it ended without one).
	Checkpoint string    `json:"checkpoint,omitempty"`
	Made       time.Time `json:"made"`
}

// noteFleetOwner keeps whose fleet res is, where a principal other than
// the host's own user ran it: the console shows it to that principal
// alone. A failure is logged: the fleet stays the host's own user's.
func (s *Server) noteFleetOwner(res *host.FleetResult, o string) {
	if o == "" || o == host.LocalOwner {
		return
	}
	if err := safefile.Write(filepath.Join(res.Dir, fleetOwnerFile), []byte(o), 0o600); err != nil {
		s.Log.Warn("whose fleet it is was not kept", "fleet", res.ID, "err", err)
	}
}

// fleetDir is fleet id's directory when owner may see it.
func (s *Server) fleetDir(o, id string) (string, error) {
	notFound := fmt.Errorf("fleet %q: %w", id, os.ErrNotExist)
	if !strings.HasPrefix(id, "fl-") || strings.ContainsAny(id, `/\.`) || len(id) > 64 {
		return "", notFound
	}
	dir := s.Live.Store.Path("fleets", id)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", notFound
	}
	if o == host.LocalOwner {
		return dir, nil // the host's own user sees every fleet
	}
	if b, err := os.ReadFile(filepath.Join(dir, fleetOwnerFile)); err != nil || string(b) != o {
		return "", notFound
	}
	return dir, nil
}

// consoleFleets lists the caller's fleets, newest first.
func (s *Server) consoleFleets(w http.ResponseWriter, r *http.Request) {
	ents, err := os.ReadDir(s.Live.Store.Path("fleets"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		writeErr(w, err)
		return
	}
	out := []ConsoleFleet{}
	for _, e := range ents {
		dir, err := s.fleetDir(owner(r), e.Name())
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		f := ConsoleFleet{ID: e.Name(), Made: fi.ModTime().UTC()}
		if fl, cp, err := host.LoadFleet(dir); err == nil {
			f.Items, f.Checkpoint = len(fl.Items), string(cp)
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Made.After(out[j].Made) })
	writeJSON(w, 200, out)
}

// ConsoleProof is one item's inclusion proof (what `sandbox fleet prove
// FLEET ITEM` prints) with the fleet's signed checkpoint it is for.
type ConsoleProof struct {
	Item       fleet.Item `json:"item"`
	Size       uint64     `json:"size"`
	Path       []string   `json:"path"`
	Checkpoint string     `json:"checkpoint"`
}

// consoleFleetItem serves item n's inclusion proof in the caller's
// fleet's final checkpoint: the page checks it.
func (s *Server) consoleFleetItem(w http.ResponseWriter, r *http.Request) {
	dir, err := s.fleetDir(owner(r), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	f, cp, err := host.LoadFleet(dir)
	if err != nil {
		writeErr(w, fmt.Errorf("fleet %s: %w", r.PathValue("id"), err))
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 || n >= len(f.Items) {
		writeErr(w, badRequest(fmt.Sprintf("item %q: an index from 0 to %d", r.PathValue("n"), len(f.Items)-1)))
		return
	}
	p, err := f.Prove(n, len(f.Items))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := ConsoleProof{Item: p.Item, Size: p.Size, Path: []string{}, Checkpoint: string(cp)}
	for _, h := range p.Path {
		t, _ := h.MarshalText()
		out.Path = append(out.Path, string(t))
	}
	writeJSON(w, 200, out)
}
