package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/live"
)

// watch streams the changes under a directory of a live sandbox:
// GET /v1/sandboxes/{id}/watch?path=P[&recursive=true], answered as
// application/x-ndjson, one client.WatchEvent a line: first "watching"
// (the watch is in place: every change from then on is reported), then
// what the kernel reports, until the caller goes or the sandbox ends
// ("ended", saying why). Every refusal (the path, the grants, the
// sandbox) is an error status before anything streams.
func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		writeErr(w, badRequest("query parameter \"path\": want an absolute path in the sandbox"))
		return
	}
	recursive := false
	if v := q.Get("recursive"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeErr(w, badRequest("query parameter \"recursive\": want true or false"))
			return
		}
		recursive = b
	}
	wt, err := s.Live.OpenWatch(r.Context(), r.PathValue("id"), owner(r), p, recursive)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	send := func(e client.WatchEvent) error {
		b, _ := json.Marshal(e)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return nil
	}
	if err := send(client.WatchEvent{Op: "watching", Path: p}); err != nil {
		wt.Close()
		return
	}
	wt.Run(r.Context(), func(e live.WatchEvent) error {
		return send(client.WatchEvent{Op: e.Op, Path: e.Path, From: e.From, Dir: e.Dir, Why: e.Why})
	})
}
