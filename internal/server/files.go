package server

import (
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/opensubstrate/sandbox/client"
)

// upload writes the body to ?path= in the sandbox (a read-write grant's).
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeErr(w, badRequest("query parameter \"path\": want the file's absolute path in the sandbox"))
		return
	}
	mode := os.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o777 {
			writeErr(w, badRequest("query parameter \"mode\": want octal permissions, 0 to 777"))
			return
		}
		mode = os.FileMode(v)
	}
	n, err := s.Live.Upload(r.Context(), r.PathValue("id"), owner(r), p, r.Body, mode, s.MaxUpload)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 201, map[string]any{"path": p, "size": n})
}

// download sends ?path= (a file), or lists it (a directory, with ?list=1).
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeErr(w, badRequest("query parameter \"path\": want an absolute path in the sandbox"))
		return
	}
	if r.URL.Query().Get("list") != "" {
		l, err := s.Live.List(r.Context(), r.PathValue("id"), owner(r), p)
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]client.FileInfo, 0, len(l))
		for _, f := range l {
			out = append(out, client.FileInfo{Name: f.Name, Size: f.Size, Mode: f.Mode.String(), Dir: f.Mode.IsDir(), Link: f.Mode&os.ModeSymlink != 0, ModTime: f.ModTime})
		}
		writeJSON(w, 200, out)
		return
	}
	f, fi, err := s.Live.Download(r.Context(), r.PathValue("id"), owner(r), p)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	io.CopyN(w, f, fi.Size())
}
