package tree

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/jcs"
	"github.com/opensubstrate/sandbox/reject"
)

// Type is a tree document's "tree".
const Type = "sandbox.tree/1"

// Bounds.
const (
	ChunkSize  = 1 << 20
	MaxPath    = 4096
	MaxEntries = 1 << 20
)

// Tree is a captured directory.
type Tree struct {
	Tree    string
	Entries []Entry
}

// Entry is one thing under the directory. Path and Target are the raw
// bytes of the name (a file name need not be UTF-8).
type Entry struct {
	Path   string      // slash-separated, relative, clean
	Kind   string      // "dir", "file" or "link"
	Mode   int64       // permission bits (0777 at most); dirs and files
	Size   int64       // files
	Chunks []addr.Addr // files: their content, in order
	Target string      // links
}

// The wire form: a name that is UTF-8 is written as a string ("path",
// "target"), any other as the hex of its bytes ("path_hex",
// "target_hex"), so that every name survives, and each has one form.
type (
	treeWire struct {
		Tree    string      `json:"tree"`
		Entries []entryWire `json:"entries"`
	}
	entryWire struct {
		Path      string      `json:"path,omitempty"`
		PathHex   string      `json:"path_hex,omitempty"`
		Kind      string      `json:"kind"`
		Mode      int64       `json:"mode,omitempty"`
		Size      int64       `json:"size,omitempty"`
		Chunks    []addr.Addr `json:"chunks,omitempty"`
		Target    string      `json:"target,omitempty"`
		TargetHex string      `json:"target_hex,omitempty"`
	}
)

// name is a name's wire form: itself, or the hex of its bytes.
func name(raw string) (text, hx string) {
	if utf8.ValidString(raw) {
		return raw, ""
	}
	return "", hex.EncodeToString([]byte(raw))
}

// unname is a name from its wire form, refusing a second form of one.
func unname(text, hx, field string) (string, error) {
	switch {
	case text != "" && hx != "":
		return "", reject.New(reject.Invalid, field, "both the name and its hex")
	case hx == "":
		return text, nil
	}
	b, err := hex.DecodeString(hx)
	if err != nil || hex.EncodeToString(b) != hx {
		return "", reject.New(reject.Invalid, field+"_hex", "not lowercase hex")
	}
	if utf8.Valid(b) {
		return "", reject.New(reject.NonCanonical, field+"_hex", "a UTF-8 name is written as itself")
	}
	return string(b), nil
}

func (t *Tree) wire() treeWire {
	w := treeWire{Tree: t.Tree, Entries: make([]entryWire, len(t.Entries))}
	for i, e := range t.Entries {
		p, ph := name(e.Path)
		tg, th := name(e.Target)
		w.Entries[i] = entryWire{Path: p, PathHex: ph, Kind: e.Kind, Mode: e.Mode, Size: e.Size, Chunks: e.Chunks, Target: tg, TargetHex: th}
	}
	return w
}

// Blobs is where chunks and trees are kept, by address.
type Blobs interface {
	PutBlob(a addr.Addr, b []byte) error
	Blob(a addr.Addr) ([]byte, error)
	HasBlob(a addr.Addr) bool
}

// HashedPutter is a Blobs that stores bytes whose address the caller
// computed from them itself without hashing them again (store.Batch).
type HashedPutter interface {
	PutHashed(a addr.Addr, b []byte) error
}

// BlobReader is a Blobs that can read a blob into a buffer of the
// caller's (store.Store).
type BlobReader interface {
	BlobInto(a addr.Addr, buf []byte) ([]byte, error)
}

// Capturer captures directories, remembering the files it read so that
// an unchanged one is not read again.
type Capturer struct {
	Blobs Blobs
	mu    sync.Mutex
	seen  map[fileID]Entry
}

// fileID is what says a file is unchanged since it was last read.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

// Stats say what a capture did.
type Stats struct {
	Files, Dirs, Links int
	Bytes              int64 // in the files
	Read               int64 // bytes read (the rest was known unchanged)
	Stored             int64 // bytes of new chunks stored
	// Known are the captured files as a later Capturer may be Seeded
	// with them (what a host keeps across its restarts).
	Known []Known
	// Skipped are the special files left out (sockets, fifos, devices),
	// by their paths under the directory.
	Skipped []string
}

// Known is a file as captured: what says it is unchanged, and its
// content's chunks.
type Known struct {
	Dev     uint64      `json:"dev"`
	Ino     uint64      `json:"ino"`
	Size    int64       `json:"size"`
	MtimeNS int64       `json:"mtime_ns"`
	CtimeNS int64       `json:"ctime_ns"`
	Chunks  []addr.Addr `json:"chunks"`
}

func (k Known) id() fileID {
	return fileID{k.Dev, k.Ino, k.Size, syscall.NsecToTimespec(k.MtimeNS), syscall.NsecToTimespec(k.CtimeNS)}
}

func knownOf(id fileID, chunks []addr.Addr) Known {
	return Known{Dev: id.dev, Ino: id.ino, Size: id.size, MtimeNS: id.mtime.Nano(), CtimeNS: id.ctime.Nano(), Chunks: chunks}
}

// Seed tells the capturer of files captured before (by another process,
// before a restart): those still unchanged are not read again.
func (c *Capturer) Seed(ks []Known) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[fileID]Entry{}
	}
	for _, k := range ks {
		c.seen[k.id()] = Entry{Kind: "file", Size: k.Size, Chunks: k.Chunks}
	}
}

// Capture stores the tree of dir and returns its address. dir must be
// quiescent (its writers frozen) for the tree to be one moment's.
func (c *Capturer) Capture(dir string) (addr.Addr, Stats, error) {
	var st Stats
	t := Tree{Tree: Type}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if len(rel) > MaxPath {
			return fmt.Errorf("%q: a path over %d bytes cannot be kept", rel, MaxPath)
		}
		if len(t.Entries) >= MaxEntries {
			return fmt.Errorf("more than %d entries", MaxEntries)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch m := info.Mode(); {
		case m.IsDir():
			st.Dirs++
			t.Entries = append(t.Entries, Entry{Path: rel, Kind: "dir", Mode: int64(m.Perm())})
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if len(target) > MaxPath {
				return fmt.Errorf("%q: a link whose target is over %d bytes cannot be kept", rel, MaxPath)
			}
			st.Links++
			t.Entries = append(t.Entries, Entry{Path: rel, Kind: "link", Target: target})
		case m.IsRegular():
			e, err := c.file(p, rel, info, &st)
			if err != nil {
				return err
			}
			st.Files++
			st.Bytes += e.Size
			t.Entries = append(t.Entries, e)
		default:
			// A socket or a fifo means nothing once the processes that
			// held it are gone (a dev server's socket); a device cannot
			// be made in a sandbox. Left out, and said.
			st.Skipped = append(st.Skipped, rel)
		}
		return nil
	})
	if err != nil {
		return addr.Addr{}, st, fmt.Errorf("capture %s: %w", dir, err)
	}
	// In path order (a directory's children after it, as its path is
	// their prefix): a walk goes name by name, so "a/x" comes before
	// "a-b", which sorts first.
	sort.Slice(t.Entries, func(i, j int) bool { return t.Entries[i].Path < t.Entries[j].Path })
	b, err := jcs.Marshal(t.wire())
	if err != nil {
		return addr.Addr{}, st, err
	}
	a := addr.Of(b)
	if err := c.Blobs.PutBlob(a, b); err != nil {
		return addr.Addr{}, st, err
	}
	return a, st, nil
}

// file captures one regular file: from what was seen of it, if it is
// unchanged, else by reading it in chunks.
func (c *Capturer) file(p, rel string, info fs.FileInfo, st *Stats) (Entry, error) {
	sys, _ := info.Sys().(*syscall.Stat_t)
	var id fileID
	known := false
	if sys != nil {
		id, known = idOf(sys)
	}
	if known {
		c.mu.Lock()
		e, ok := c.seen[id]
		c.mu.Unlock()
		if ok && c.present(e.Chunks) {
			e.Path, e.Mode = rel, int64(info.Mode().Perm())
			st.Known = append(st.Known, knownOf(id, e.Chunks))
			return e, nil
		}
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	e := Entry{Path: rel, Kind: "file", Mode: int64(info.Mode().Perm())}
	put := c.Blobs.PutBlob
	if h, ok := c.Blobs.(HashedPutter); ok {
		put = h.PutHashed // each chunk's address is hashed from its bytes here
	}
	// A file of more than one chunk is read and hashed while its chunks
	// before are written: two stages, a few chunks' buffers between them.
	w := newChunkWriter(put, info.Size() > ChunkSize)
	for {
		buf := w.buffer()
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			a := addr.Of(buf[:n])
			if !c.Blobs.HasBlob(a) {
				if werr := w.put(a, buf[:n]); werr != nil {
					w.wait()
					return Entry{}, werr
				}
				st.Stored += int64(n)
			} else {
				w.release(buf)
			}
			e.Chunks = append(e.Chunks, a)
			e.Size += int64(n)
			st.Read += int64(n)
		} else {
			w.release(buf)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			w.wait()
			return Entry{}, err
		}
	}
	if err := w.wait(); err != nil {
		return Entry{}, err
	}
	if sys != nil && e.Size == sys.Size {
		c.mu.Lock()
		if c.seen == nil {
			c.seen = map[fileID]Entry{}
		}
		c.seen[id] = e
		c.mu.Unlock()
		st.Known = append(st.Known, knownOf(id, e.Chunks))
	}
	return e, nil
}

// Remember records the files of dir, just restored from tree a, as
// captured: a capture of dir reads again only what changes after this.
// It returns them as Known, for a later Capturer's Seed.
func (c *Capturer) Remember(dir string, a addr.Addr) ([]Known, error) {
	t, err := Load(c.Blobs, a)
	if err != nil {
		return nil, err
	}
	var ks []Known
	for _, e := range t.Entries {
		if e.Kind != "file" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, filepath.FromSlash(e.Path)), &st); err != nil {
			return nil, err
		}
		if st.Size != e.Size {
			continue
		}
		id := fileID{uint64(st.Dev), st.Ino, st.Size, syscall.Timespec(st.Mtim), syscall.Timespec(st.Ctim)}
		ks = append(ks, knownOf(id, e.Chunks))
	}
	c.Seed(ks)
	return ks, nil
}

func (c *Capturer) present(chunks []addr.Addr) bool {
	for _, a := range chunks {
		if !c.Blobs.HasBlob(a) {
			return false
		}
	}
	return true
}

// Load reads and checks the tree at address a.
func Load(b Blobs, a addr.Addr) (*Tree, error) {
	raw, err := b.Blob(a)
	if err != nil {
		return nil, err
	}
	var w treeWire
	if err := jcs.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("tree %s: %w", a, err)
	}
	if w.Tree != Type {
		return nil, reject.New(reject.Unrecognised, "tree", "%q, want %q", w.Tree, Type)
	}
	if len(w.Entries) > MaxEntries {
		return nil, reject.New(reject.Invalid, "entries", "%d entries, over %d", len(w.Entries), MaxEntries)
	}
	t := Tree{Tree: w.Tree, Entries: make([]Entry, len(w.Entries))}
	for i, we := range w.Entries {
		where := fmt.Sprintf("entries[%d]", i)
		p, err := unname(we.Path, we.PathHex, where+".path")
		if err != nil {
			return nil, err
		}
		tg, err := unname(we.Target, we.TargetHex, where+".target")
		if err != nil {
			return nil, err
		}
		t.Entries[i] = Entry{Path: p, Kind: we.Kind, Mode: we.Mode, Size: we.Size, Chunks: we.Chunks, Target: tg}
	}
	seen := map[string]string{}
	for i, e := range t.Entries {
		where := fmt.Sprintf("entries[%d]", i)
		if e.Path == "" || len(e.Path) > MaxPath || path.Clean(e.Path) != e.Path || path.IsAbs(e.Path) || e.Path == ".." || strings.HasPrefix(e.Path, "../") {
			return nil, reject.New(reject.Invalid, where, "path %q is not a clean relative path", e.Path)
		}
		if i > 0 && t.Entries[i-1].Path >= e.Path {
			return nil, reject.New(reject.NonCanonical, where, "paths are not in order")
		}
		if parent := path.Dir(e.Path); parent != "." && seen[parent] != "dir" {
			return nil, reject.New(reject.Invalid, where, "%q is not under a directory of the tree", e.Path)
		}
		if e.Mode&^0o777 != 0 {
			return nil, reject.New(reject.Invalid, where, "mode %o: only permission bits", e.Mode)
		}
		switch e.Kind {
		case "dir":
		case "file":
			n := int64(len(e.Chunks))
			if e.Size > n*ChunkSize || e.Size < 0 || (n > 0 && e.Size <= (n-1)*ChunkSize) {
				return nil, reject.New(reject.Invalid, where, "%d bytes in %d chunks", e.Size, n)
			}
		case "link":
			if e.Target == "" || len(e.Target) > MaxPath {
				return nil, reject.New(reject.MissingField, where, "a link without its target")
			}
		default:
			return nil, reject.New(reject.Invalid, where, "kind %q", e.Kind)
		}
		seen[e.Path] = e.Kind
	}
	return &t, nil
}

// RestoreWorkers is how many files a restore writes at once.
const RestoreWorkers = 4

// Restore makes dir (which must not exist, or be an empty directory:
// a mount point, say) and writes the tree at a into it. owner, when not
// nil, is the uid and gid everything is made with. On failure nothing of
// what it wrote is left (nor dir, where it made it).
func Restore(b Blobs, a addr.Addr, dir string, owner *[2]int) (err error) {
	t, err := Load(b, a)
	if err != nil {
		return err
	}
	made := true
	if err := os.Mkdir(dir, 0o700); err != nil {
		ents, rerr := os.ReadDir(dir)
		if !errors.Is(err, fs.ErrExist) || rerr != nil || len(ents) > 0 {
			return err
		}
		made = false
	}
	defer func() {
		switch {
		case err == nil:
		case made:
			os.RemoveAll(dir)
		default:
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}()
	root, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	rfd := int(root.Fd())
	chown := func(fd int, p string) error {
		if owner == nil {
			return nil
		}
		if p == "" {
			return unix.Fchown(fd, owner[0], owner[1])
		}
		return unix.Fchownat(rfd, p, owner[0], owner[1], unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := chown(rfd, ""); err != nil {
		return err
	}
	var links, files []Entry
	dirs := []Entry{}
	for _, e := range t.Entries {
		switch e.Kind {
		case "dir":
			if err := unix.Mkdirat(rfd, e.Path, 0o700); err != nil {
				return fmt.Errorf("restore %s: %w", e.Path, err)
			}
			if err := chown(-1, e.Path); err != nil {
				return err
			}
			dirs = append(dirs, e)
		case "file":
			files = append(files, e)
		case "link":
			links = append(links, e)
		}
	}
	// Files in parallel (reading and checking chunks, writing), into the
	// directories made above; no link exists yet to write through.
	work := make(chan Entry)
	errs := make(chan error, RestoreWorkers)
	var wg sync.WaitGroup
	for range RestoreWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte // a worker's: chunks are read into it
			for e := range work {
				err := writeFile(b, rfd, e, &buf)
				if err == nil {
					err = chown(-1, e.Path)
				}
				if err != nil {
					errs <- fmt.Errorf("restore %s: %w", e.Path, err)
					for range work { // drain: the restore has failed
					}
					return
				}
			}
		}()
	}
	for _, e := range files {
		work <- e
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for _, e := range links {
		if err := unix.Symlinkat(e.Target, rfd, e.Path); err != nil {
			return fmt.Errorf("restore %s: %w", e.Path, err)
		}
		if err := chown(-1, e.Path); err != nil {
			return err
		}
	}
	// Directories get their modes last: a read-only one was written into.
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].Path > dirs[j].Path })
	for _, e := range dirs {
		if err := unix.Fchmodat(rfd, e.Path, uint32(e.Mode), 0); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(b Blobs, rfd int, e Entry, buf *[]byte) error {
	fd, err := unix.Openat(rfd, e.Path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(e.Mode))
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), e.Path)
	defer f.Close()
	var n int64
	br, into := b.(BlobReader)
	for _, a := range e.Chunks {
		var c []byte
		if into {
			c, err = br.BlobInto(a, *buf) // checked against its address
			*buf = c[:cap(c)]
		} else {
			c, err = b.Blob(a) // checked against its address
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(c); err != nil {
			return err
		}
		n += int64(len(c))
	}
	if n != e.Size {
		return reject.New(reject.Invalid, e.Path, "its chunks hold %d bytes, the tree says %d", n, e.Size)
	}
	return f.Chmod(fs.FileMode(e.Mode))
}

// chunkWriter stores a file's chunks: at once (sequential), or by a
// goroutine of its own while the next chunks are read and hashed
// (pipelined), through chunkBuffers buffers.
type chunkWriter struct {
	putFn func(addr.Addr, []byte) error
	jobs  chan chunkJob
	free  chan []byte
	done  chan error
	err   error // the first failed put (sequential), or what done said
	one   []byte
}

type chunkJob struct {
	a addr.Addr
	b []byte
}

// chunkBuffers is how many chunks a pipelined writer holds at once.
const chunkBuffers = 3

func newChunkWriter(put func(addr.Addr, []byte) error, pipelined bool) *chunkWriter {
	w := &chunkWriter{putFn: put}
	if !pipelined {
		w.one = make([]byte, ChunkSize)
		return w
	}
	w.jobs, w.free, w.done = make(chan chunkJob, chunkBuffers), make(chan []byte, chunkBuffers), make(chan error, 1)
	for range chunkBuffers {
		w.free <- make([]byte, ChunkSize)
	}
	go func() {
		var err error
		for j := range w.jobs {
			if err == nil {
				err = w.putFn(j.a, j.b)
			}
			w.free <- j.b[:cap(j.b)]
		}
		w.done <- err
	}()
	return w
}

// buffer is a buffer to read the next chunk into.
func (w *chunkWriter) buffer() []byte {
	if w.jobs == nil {
		return w.one
	}
	return <-w.free
}

// release gives back a buffer that was not put.
func (w *chunkWriter) release(b []byte) {
	if w.jobs != nil {
		w.free <- b[:cap(b)]
	}
}

// put stores chunk b (in buffer's memory) under a: now, or queued; a
// queued put's failure is said by wait (the writer skips what comes
// after it).
func (w *chunkWriter) put(a addr.Addr, b []byte) error {
	if w.jobs == nil {
		return w.putFn(a, b)
	}
	w.jobs <- chunkJob{a, b}
	return nil
}

// wait waits for every queued put and says the first failure.
func (w *chunkWriter) wait() error {
	if w.jobs != nil {
		close(w.jobs)
		w.err = <-w.done
		w.jobs = nil
	}
	return w.err
}
