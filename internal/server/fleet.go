package server

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/host"
)

// MaxFleetItems bounds a fleet's inputs in one request.
const MaxFleetItems = 1_000_000

// fleet runs a fleet across the service's workers, streaming progress
// (application/x-ndjson: {"progress"} frames, then {"fleet"} or
// {"error"}).
func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	var spec client.FleetSpec
	if err := decode(w, r, &spec, 64<<20); err != nil {
		writeErr(w, err)
		return
	}
	n := len(spec.Inputs) + len(spec.Units)
	switch {
	case len(spec.Units) > 0 && (len(spec.Args) > 0 || len(spec.Inputs) > 0):
		writeErr(w, badRequest("fields \"units\" and \"args\"/\"inputs\": a fleet is one command over inputs, or units each with its own command line, not both"))
		return
	case len(spec.Units) == 0 && len(spec.Args) == 0:
		writeErr(w, badRequest("field \"args\": a fleet runs a command"))
		return
	case n == 0 || n > MaxFleetItems:
		writeErr(w, badRequest("fields \"inputs\" or \"units\": from 1 to 1000000 items"))
		return
	case spec.Workers < 0 || spec.Workers > 256:
		writeErr(w, badRequest("field \"workers\": from 1 to 256 (0: 2)"))
		return
	}
	g, err := runGrants(client.ExecSpec{Grants: spec.Grants, GrantsJSON: spec.GrantsJSON})
	if err != nil {
		writeErr(w, err)
		return
	}
	cwd := spec.Dir
	if cwd == "" {
		cwd = "/"
	}
	workers := spec.Workers
	if workers == 0 {
		workers = 2
	}
	// The command is checked once, before anything runs.
	first := spec.Units
	if len(first) == 0 {
		first = [][]string{append(append([]string(nil), spec.Args...), spec.Inputs[0])}
	}
	read, look := s.Live.Reader(r.Context(), owner(r), "fleet"), s.Live.Looker(r.Context(), owner(r), "fleet")
	// Each item's grants are checked against the caller's authority as a
	// run's are, before it runs.
	if _, err := host.Command(host.CommandLine{Args: first[0], Env: spec.Env, Grants: g, Cwd: cwd, Read: read, Look: look}); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	var mu sync.Mutex
	send := func(f client.FleetFrame) {
		b, _ := json.Marshal(f)
		mu.Lock()
		defer mu.Unlock()
		w.Write(append(b, '\n'))
		if fl != nil {
			fl.Flush()
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	total := n
	res, err := s.Live.RunFleet(ctx, host.FleetSpec{
		Owner:   owner(r),
		Command: host.CommandLine{Args: spec.Args, Env: spec.Env, Grants: g, Cwd: cwd, Read: read, Look: look},
		Inputs:  spec.Inputs, Units: spec.Units, Workers: workers, CheckpointEvery: spec.CheckpointEvery,
		Progress: func(done, total int) {
			// At most about 200 frames, and the last.
			if done == total || done%max(1, total/200) == 0 {
				send(client.FleetFrame{Progress: &client.FleetProgress{Done: done, Total: total}})
			}
		},
	})
	if err != nil {
		e := apiError(err)
		send(client.FleetFrame{Error: &e})
		return
	}
	s.metrics.fleet(total)
	s.noteFleetOwner(res, owner(r)) // whose it is, for the console (console.go)
	send(client.FleetFrame{Fleet: &client.FleetResult{ID: res.ID, Dir: res.Dir, Items: len(res.Items), Failed: res.Failed, Checkpoint: res.Checkpoint}})
}
