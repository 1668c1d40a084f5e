package server

import (
	"net/http"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/record"
)

// The durable-run endpoints: a live sandbox's record, suspend, resume,
// close.

func (s *Server) suspend(w http.ResponseWriter, r *http.Request) {
	snap, err := s.Host.Suspend(r.Context(), r.PathValue("id"), owner(r))
	if err != nil {
		writeErr(w, err)
		return
	}
	s.metrics.sandbox(-1)
	writeJSON(w, 200, SnapshotOf(snap))
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	i, err := s.Host.Resume(r.Context(), r.PathValue("id"), owner(r))
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
	if _, err := s.Host.Sandbox(r.PathValue("id"), owner(r)); err == nil {
		live = true
	}
	if err := s.Host.CloseRecord(r.PathValue("id"), owner(r), "closed by its owner"); err != nil {
		writeErr(w, err)
		return
	}
	if live {
		s.metrics.sandbox(-1)
	}
	w.WriteHeader(204)
}

func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	l, err := s.Host.Records(owner(r))
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
func RecordOf(ri host.RecordInfo) client.Record {
	return client.Record{ID: ri.ID, Phase: string(ri.Phase), Head: ri.Head.String(), Segments: ri.Segments, Executed: ri.Executed, IdleUJ: ri.IdleUJ,
		ActiveUJ: ri.ActiveUJ, TotalUJ: ri.TotalUJ, RunsMissing: ri.RunsMissing, Error: ri.Err}
}
