package server

import (
	"net/http"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/lifecycle"
	"github.com/opensubstrate/sandbox/internal/live"
	"github.com/opensubstrate/sandbox/record"
)

// The durable-run endpoints: a live sandbox's record, suspend, resume,
// close.

func (s *Server) suspend(w http.ResponseWriter, r *http.Request) {
	snap, err := s.Live.Suspend(r.Context(), r.PathValue("id"), owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(-1)
	writeJSON(w, 200, SnapshotOf(snap))
}

// fork makes sandboxes from one sandbox's state: 200 with every child,
// made or not (partial success is said per child), or the fork's own
// error where it made nothing.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var spec client.ForkSpec
	if err := decode(w, r, &spec, MaxBody); err != nil {
		writeErr(w, err)
		return
	}
	f, err := s.Live.Fork(s.life(r), r.PathValue("id"), owner(r), live.ForkSpec{Count: spec.Count, Suspended: spec.Suspended})
	if err != nil {
		writeErr(w, err)
		return
	}
	out := client.Forked{Parent: f.Parent, Genesis: f.Genesis.String(), Head: f.Head.String(), Snapshot: SnapshotOf(f.Snapshot), Children: []client.ForkChild{}}
	for _, c := range f.Children {
		x := client.ForkChild{ID: c.ID}
		if c.Err != nil {
			e := apiError(c.Err)
			x.Error = &e
		} else {
			sb := sandboxOf(c.Sandbox)
			x.Sandbox = &sb
			if !c.Sandbox.Suspended {
				s.metrics.sandbox(+1)
			}
		}
		out.Children = append(out.Children, x)
	}
	writeJSON(w, 200, out)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	pl, err := s.resumePlacement(r, id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if pl != nil && pl.Host != s.Live.Key.Public() && !forwarded(r) {
		// Placed on another host: resumed there, as the caller's.
		p, err := s.Peers.Peer(r.Context(), pl.Host.ID().String())
		if err != nil {
			writeErr(w, err)
			return
		}
		s.proxyTo(w, r, p, id)
		return
	}
	i, err := s.Live.ResumePlaced(r.Context(), id, owner(r), pl)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(1)
	sb := sandboxOf(i)
	for _, c := range i.Continued {
		x := client.Continued{N: c.N, Stdout: c.Stdout, Stderr: c.Stderr}
		if c.Run != nil {
			x.Result = ResultOf(c.Run)
		}
		if c.Err != nil {
			x.Error = c.Err.Error()
		}
		sb.Continued = append(sb.Continued, x)
	}
	writeJSON(w, 200, sb)
}

func (s *Server) closeRecord(w http.ResponseWriter, r *http.Request) {
	live := false
	if _, err := s.Live.Sandbox(r.PathValue("id"), owner(r)); err == nil {
		live = true
	}
	if err := s.Live.CloseRecord(r.PathValue("id"), owner(r), "closed by its owner"); err != nil {
		writeErr(w, err)
		return
	}
	if live {
		s.metrics.sandbox(-1)
	}
	w.WriteHeader(204)
}

func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	l, err := s.Live.Records(owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := []client.Record{}
	for _, ri := range l {
		out = append(out, RecordOf(ri))
	}
	writeJSON(w, 200, out)
}

// SnapshotOf is a snapshot as the API says it.
func SnapshotOf(s record.Snapshot) client.Snapshot {
	out := client.Snapshot{Root: s.Root.String(), Manifest: s.Manifest.String()}
	if s.Memory != nil {
		out.Memory = s.Memory.String()
	}
	return out
}

// RecordOf is a record as the API lists it.
func RecordOf(ri live.RecordInfo) client.Record {
	return client.Record{ID: ri.ID, Phase: string(ri.Phase), Head: ri.Head.String(), Segments: ri.Segments, Executed: ri.Executed, IdleUJ: ri.IdleUJ,
		ActiveUJ: ri.ActiveUJ, TotalUJ: ri.TotalUJ, RunsMissing: ri.RunsMissing, Error: ri.Err}
}

func claimOf(c client.Claim) lifecycle.Claim {
	return lifecycle.Claim{Run: c.Run, Requester: c.Requester, Thread: c.Thread, Repository: c.Repository, Ref: c.Ref, Head: c.Head}
}

func (s *Server) seed(w http.ResponseWriter, r *http.Request) {
	var spec client.SeedSpec
	if err := decode(w, r, &spec, MaxBody); err != nil {
		writeErr(w, err)
		return
	}
	req := live.SeedRequest{Source: spec.Source, Ref: spec.Ref, Origin: spec.Origin, Bearer: spec.Bearer, Incarnation: spec.Incarnation}
	if spec.Claim != nil {
		c := claimOf(*spec.Claim)
		req.Claim = &c
	}
	res, err := s.Live.Seed(r.Context(), r.PathValue("id"), owner(r), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := client.Seeded{Sandbox: res.Sandbox, Incarnation: res.Incarnation, State: res.State, Head: res.Head, Cached: res.Cached}
	for _, a := range res.Runs {
		out.Runs = append(out.Runs, a.String())
	}
	writeJSON(w, 200, out)
}

// preservation is a passive receipt: durable metadata only, whoever
// asks with the exact claim (the claim is the key; a wrong one learns
// nothing).
func (s *Server) preservation(w http.ResponseWriter, r *http.Request) {
	var spec client.ReceiptSpec
	if err := decode(w, r, &spec, MaxBody); err != nil {
		writeErr(w, err)
		return
	}
	rc, err := s.Live.Receipt(live.ReceiptRequest{Sandbox: r.PathValue("id"), Claim: claimOf(spec.Claim), Source: spec.Source, Incarnation: spec.Incarnation})
	if err != nil {
		writeErr(w, err)
		return
	}
	out := client.PreservationReceipt{Sandbox: rc.Sandbox, State: rc.State, Reason: rc.Reason, Checkpoint: rc.Checkpoint, Incarnation: rc.Incarnation}
	if !rc.Taken.IsZero() {
		out.Taken, out.RetainUntil = &rc.Taken, &rc.RetainUntil
	}
	writeJSON(w, 200, out)
}

// runReport is a sealed run, verified against the service's key.
func (s *Server) runReport(w http.ResponseWriter, r *http.Request) {
	v, err := s.Live.RunFor(owner(r), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 200, reportOf(v))
}

// runBundle serves a run's directory as a tar (live.RunBundle).
func (s *Server) runBundle(w http.ResponseWriter, r *http.Request) {
	if _, err := s.Live.RunFor(owner(r), r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	if err := s.Live.RunBundle(owner(r), r.PathValue("id"), w); err != nil {
		s.Log.Warn("a run's bundle cut short", "run", r.PathValue("id"), "err", err)
	}
}

// hostKey serves the key this host seals with: what a client verifies
// its runs and records under.
func (s *Server) hostKey(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, client.HostKey{Key: s.Live.Key.Public().String()})
}
