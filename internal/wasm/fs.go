package wasm

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
)

// Journal records of file system results.
type (
	errResp struct {
		_     struct{} `cbor:",toarray"`
		Errno uint16
	}
	openResp struct {
		_     struct{} `cbor:",toarray"`
		H     uint64
		Errno uint16
	}
	dataResp struct {
		_     struct{} `cbor:",toarray"`
		Data  []byte
		Errno uint16
	}
	nResp struct {
		_     struct{} `cbor:",toarray"`
		N     int64
		Errno uint16
	}
	statResp struct {
		_     struct{} `cbor:",toarray"`
		St    statRec
		Errno uint16
	}
	statRec struct {
		_                      struct{} `cbor:",toarray"`
		Dev, Ino               uint64
		Mode                   uint32
		Nlink                  uint64
		Size, Atim, Mtim, Ctim int64
	}
	direntsResp struct {
		_     struct{} `cbor:",toarray"`
		Ents  []direntRec
		Errno uint16
	}
	direntRec struct {
		_    struct{} `cbor:",toarray"`
		Ino  uint64
		Name string
		Type uint32
	}
	strResp struct {
		_     struct{} `cbor:",toarray"`
		S     string
		Errno uint16
	}
)

func toStat(r statRec) sys.Stat_t {
	return sys.Stat_t{Dev: r.Dev, Ino: r.Ino, Mode: fs.FileMode(r.Mode), Nlink: r.Nlink, Size: r.Size, Atim: r.Atim, Mtim: r.Mtim, Ctim: r.Ctim}
}

func fromStat(s sys.Stat_t) statRec {
	return statRec{Dev: s.Dev, Ino: s.Ino, Mode: uint32(s.Mode), Nlink: s.Nlink, Size: s.Size, Atim: s.Atim, Mtim: s.Mtim, Ctim: s.Ctim}
}

// hostFS is the live side of the file system: it touches the host. Its
// implementation opens everything beneath a grant's root (fs_linux.go).
type hostFS interface {
	open(abs string, flag experimentalsys.Oflag, perm fs.FileMode) (hostFile, experimentalsys.Errno)
	stat(abs string, follow bool) (sys.Stat_t, experimentalsys.Errno)
	mkdir(abs string, perm fs.FileMode) experimentalsys.Errno
	chmod(abs string, perm fs.FileMode) experimentalsys.Errno
	rename(from, to string) experimentalsys.Errno
	rmdir(abs string) experimentalsys.Errno
	unlink(abs string) experimentalsys.Errno
	link(from, to string) experimentalsys.Errno
	symlink(target, link string) experimentalsys.Errno
	readlink(abs string) (string, experimentalsys.Errno)
	utimens(abs string, atim, mtim int64) experimentalsys.Errno
	close() error
}

// hostFile is an open host file.
type hostFile interface {
	experimentalsys.File
}

// brokerFS is the guest's file system, mounted at "/". Every operation is
// decided by the Enforcer, and every result is journaled.
type brokerFS struct {
	experimentalsys.UnimplementedFS
	b    *broker
	host hostFS // nil in replay

	virt map[string][]string // ancestors of grants → their child names

	mu     sync.Mutex
	files  map[uint64]hostFile
	nextH  uint64
	opened map[uint64]*openInfo // what the guest holds, live or replayed
}

// openInfo is an open handle as a park keeps it.
type openInfo struct {
	path    string
	flag    uint32
	dirRead int64 // directory entries listed since it was opened or rewound
}

func newBrokerFS(b *broker, host hostFS, grants []grant.Storage) *brokerFS {
	f := &brokerFS{b: b, host: host, files: map[uint64]hostFile{}, nextH: 1, virt: map[string][]string{}, opened: map[uint64]*openInfo{}}
	for _, g := range grants {
		for p := g.Path; p != "/"; p = path.Dir(p) {
			parent := path.Dir(p)
			kids := f.virt[parent]
			name := path.Base(p)
			if !contains(kids, name) {
				f.virt[parent] = append(kids, name)
			}
		}
	}
	for k := range f.virt {
		sort.Strings(f.virt[k])
	}
	if _, ok := f.virt["/"]; !ok {
		f.virt["/"] = nil
	}
	return f
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// abs turns wazero's root-relative path into an absolute guest path, which
// is also the host path.
func abs(p string) string {
	p = strings.TrimSuffix(p, "/")
	if p == "" || p == "." {
		return "/"
	}
	return path.Clean("/" + p)
}

func errno(e experimentalsys.Errno) uint16 { return uint16(e) }

// errRefused is the live file system's answer when a path would resolve
// out of the grant it was decided in (a symlink or "..", or a directory
// renamed above another grant). It is journaled as it is, so that a
// replay logs the same refusal; the guest sees EACCES. It is outside
// wazero's errno numbers.
const errRefused experimentalsys.Errno = 0x100

// refused turns errRefused into EACCES, logging the refusal against the
// grant the path names; any other errno passes.
func (f *brokerFS) refused(p string, e experimentalsys.Errno) experimentalsys.Errno {
	if e != errRefused {
		return e
	}
	g := "/"
	if s := f.b.enf.Storage(p); s != nil {
		g = s.Path
	}
	f.b.enf.Note(grant.KindFS, grant.OpRead, p, false, "resolves outside fs:"+g+" (a symlink or '..' that leaves the grant, or a renamed directory above another grant)")
	return experimentalsys.EACCES
}

// virtual reports whether p is an ancestor of a grant that no grant covers.
func (f *brokerFS) virtual(p string) bool {
	_, ok := f.virt[p]
	return ok && f.b.enf.Storage(p) == nil
}

func isWrite(flag experimentalsys.Oflag) bool {
	return flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_TRUNC|experimentalsys.O_APPEND) != 0
}

// decide asks the Enforcer; a denial is EACCES in the guest.
func (f *brokerFS) decide(p string, write bool) experimentalsys.Errno {
	if err := f.b.enf.File(p, write); err != nil {
		return experimentalsys.EACCES
	}
	return 0
}

type openReq struct {
	_    struct{} `cbor:",toarray"`
	Path string
	Flag uint32
	Perm uint32
}

func (f *brokerFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	a := abs(p)
	if f.virtual(a) {
		if isWrite(flag) {
			return nil, f.decide(a, true)
		}
		f.b.enf.Note(grant.KindFS, grant.OpRead, a, true, "virtual directory: an ancestor of a storage grant, listing only the way to it")
		return &virtualDir{fs: f, path: a}, 0
	}
	if e := f.decide(a, isWrite(flag)); e != 0 {
		return nil, e
	}
	r, ok := do(f.b, "fs.open", openReq{Path: a, Flag: uint32(flag), Perm: uint32(perm)}, func() openResp {
		hf, e := f.host.open(a, flag, perm)
		if e != 0 {
			return openResp{Errno: errno(e)}
		}
		f.mu.Lock()
		h := f.nextH
		f.nextH++
		f.files[h] = hf
		f.mu.Unlock()
		return openResp{H: h}
	})
	if !ok {
		return nil, experimentalsys.EIO
	}
	if r.Errno != 0 {
		return nil, f.refused(a, experimentalsys.Errno(r.Errno))
	}
	f.mu.Lock()
	f.opened[r.H] = &openInfo{path: a, flag: uint32(flag)}
	f.mu.Unlock()
	return &file{fs: f, h: r.H, path: a, append: flag&experimentalsys.O_APPEND != 0}, 0
}

type pathReq struct {
	_      struct{} `cbor:",toarray"`
	Path   string
	Follow bool
}

func (f *brokerFS) statPath(p string, follow bool) (sys.Stat_t, experimentalsys.Errno) {
	a := abs(p)
	if f.virtual(a) {
		return virtualStat(a), 0
	}
	if e := f.decide(a, false); e != 0 {
		return sys.Stat_t{}, e
	}
	r, ok := do(f.b, "fs.stat", pathReq{Path: a, Follow: follow}, func() statResp {
		st, e := f.host.stat(a, follow)
		return statResp{St: fromStat(st), Errno: errno(e)}
	})
	if !ok {
		return sys.Stat_t{}, experimentalsys.EIO
	}
	return toStat(r.St), f.refused(a, experimentalsys.Errno(r.Errno))
}

func (f *brokerFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno)  { return f.statPath(p, true) }
func (f *brokerFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) { return f.statPath(p, false) }

// mutate runs a path operation that changes the host, after deciding every
// path it touches as a write.
func (f *brokerFS) mutate(kind string, req any, paths []string, live func() experimentalsys.Errno) experimentalsys.Errno {
	for _, p := range paths {
		if e := f.decide(p, true); e != 0 {
			return e
		}
	}
	r, ok := do(f.b, kind, req, func() errResp { return errResp{Errno: errno(live())} })
	if !ok {
		return experimentalsys.EIO
	}
	return f.refused(paths[0], experimentalsys.Errno(r.Errno))
}

type modeReq struct {
	_    struct{} `cbor:",toarray"`
	Path string
	Perm uint32
}

type twoReq struct {
	_        struct{} `cbor:",toarray"`
	From, To string
}

type timesReq struct {
	_          struct{} `cbor:",toarray"`
	Path       string
	Atim, Mtim int64
}

func (f *brokerFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	a := abs(p)
	return f.mutate("fs.mkdir", modeReq{Path: a, Perm: uint32(perm)}, []string{a}, func() experimentalsys.Errno { return f.host.mkdir(a, perm) })
}

func (f *brokerFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	a := abs(p)
	return f.mutate("fs.chmod", modeReq{Path: a, Perm: uint32(perm)}, []string{a}, func() experimentalsys.Errno { return f.host.chmod(a, perm) })
}

func (f *brokerFS) Rename(from, to string) experimentalsys.Errno {
	a, b := abs(from), abs(to)
	return f.mutate("fs.rename", twoReq{From: a, To: b}, []string{a, b}, func() experimentalsys.Errno { return f.host.rename(a, b) })
}

func (f *brokerFS) Rmdir(p string) experimentalsys.Errno {
	a := abs(p)
	return f.mutate("fs.rmdir", pathReq{Path: a}, []string{a}, func() experimentalsys.Errno { return f.host.rmdir(a) })
}

func (f *brokerFS) Unlink(p string) experimentalsys.Errno {
	a := abs(p)
	return f.mutate("fs.unlink", pathReq{Path: a}, []string{a}, func() experimentalsys.Errno { return f.host.unlink(a) })
}

func (f *brokerFS) Link(oldPath, newPath string) experimentalsys.Errno {
	a, b := abs(oldPath), abs(newPath)
	return f.mutate("fs.link", twoReq{From: a, To: b}, []string{a, b}, func() experimentalsys.Errno { return f.host.link(a, b) })
}

// Symlink creates link → target. The target text is the guest's; following
// it later is still confined beneath the grant it resolves in.
func (f *brokerFS) Symlink(target, link string) experimentalsys.Errno {
	b := abs(link)
	return f.mutate("fs.symlink", twoReq{From: target, To: b}, []string{b}, func() experimentalsys.Errno { return f.host.symlink(target, b) })
}

func (f *brokerFS) Readlink(p string) (string, experimentalsys.Errno) {
	a := abs(p)
	if e := f.decide(a, false); e != 0 {
		return "", e
	}
	r, ok := do(f.b, "fs.readlink", pathReq{Path: a}, func() strResp {
		s, e := f.host.readlink(a)
		return strResp{S: s, Errno: errno(e)}
	})
	if !ok {
		return "", experimentalsys.EIO
	}
	return r.S, f.refused(a, experimentalsys.Errno(r.Errno))
}

func (f *brokerFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	a := abs(p)
	return f.mutate("fs.utimens", timesReq{Path: a, Atim: atim, Mtim: mtim}, []string{a}, func() experimentalsys.Errno { return f.host.utimens(a, atim, mtim) })
}

// closeAll closes every host file still open, at the end of a run.
func (f *brokerFS) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, hf := range f.files {
		hf.Close()
		delete(f.files, h)
	}
	if f.host != nil {
		f.host.close()
	}
}

func (f *brokerFS) hostFile(h uint64) hostFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[h]
}

// file is an open file as the guest sees it: every call is journaled by
// handle.
type file struct {
	experimentalsys.UnimplementedFile
	fs     *brokerFS
	h      uint64
	path   string
	append bool
}

type hReq struct {
	_ struct{} `cbor:",toarray"`
	H uint64
}

type readReq struct {
	_   struct{} `cbor:",toarray"`
	H   uint64
	N   int
	Off int64
}

type writeReq struct {
	_    struct{} `cbor:",toarray"`
	H    uint64
	Data addr.Addr // the content address of what was written: outputs are not inputs
	Len  int
	Off  int64
}

type seekReq struct {
	_      struct{} `cbor:",toarray"`
	H      uint64
	Off    int64
	Whence int
}

func (x *file) live() hostFile { return x.fs.hostFile(x.h) }

func (x *file) Dev() (uint64, experimentalsys.Errno) {
	st, e := x.Stat()
	return st.Dev, e
}

func (x *file) Ino() (sys.Inode, experimentalsys.Errno) {
	st, e := x.Stat()
	return st.Ino, e
}

func (x *file) IsDir() (bool, experimentalsys.Errno) {
	st, e := x.Stat()
	return st.Mode.IsDir(), e
}

func (x *file) IsAppend() bool { return x.append }

func (x *file) SetAppend(enable bool) experimentalsys.Errno {
	r, ok := do(x.fs.b, "fs.setappend", []any{x.h, enable}, func() errResp {
		return errResp{Errno: errno(x.live().SetAppend(enable))}
	})
	if !ok {
		return experimentalsys.EIO
	}
	if r.Errno == 0 {
		x.append = enable
	}
	return experimentalsys.Errno(r.Errno)
}

func (x *file) Stat() (sys.Stat_t, experimentalsys.Errno) {
	r, ok := do(x.fs.b, "fs.fstat", hReq{H: x.h}, func() statResp {
		st, e := x.live().Stat()
		return statResp{St: fromStat(st), Errno: errno(e)}
	})
	if !ok {
		return sys.Stat_t{}, experimentalsys.EIO
	}
	return toStat(r.St), experimentalsys.Errno(r.Errno)
}

func (x *file) read(kind string, buf []byte, off int64) (int, experimentalsys.Errno) {
	if len(buf) == 0 {
		return 0, 0
	}
	r, ok := do(x.fs.b, kind, readReq{H: x.h, N: len(buf), Off: off}, func() dataResp {
		tmp := make([]byte, len(buf))
		var n int
		var e experimentalsys.Errno
		if kind == "fs.read" {
			n, e = x.live().Read(tmp)
		} else {
			n, e = x.live().Pread(tmp, off)
		}
		return dataResp{Data: tmp[:n], Errno: errno(e)}
	})
	if !ok {
		return 0, experimentalsys.EIO
	}
	if len(r.Data) > len(buf) {
		return 0, experimentalsys.EIO
	}
	if err := x.fs.b.enf.Charge(x.path, int64(len(r.Data)), false); err != nil {
		return 0, experimentalsys.EPERM
	}
	return copy(buf, r.Data), experimentalsys.Errno(r.Errno)
}

func (x *file) Read(buf []byte) (int, experimentalsys.Errno) { return x.read("fs.read", buf, 0) }
func (x *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	return x.read("fs.pread", buf, off)
}

func (x *file) write(kind string, buf []byte, off int64) (int, experimentalsys.Errno) {
	if len(buf) == 0 {
		return 0, 0
	}
	if err := x.fs.b.enf.Charge(x.path, int64(len(buf)), true); err != nil {
		return 0, experimentalsys.EPERM
	}
	r, ok := do(x.fs.b, kind, writeReq{H: x.h, Data: addr.Of(buf), Len: len(buf), Off: off}, func() nResp {
		var n int
		var e experimentalsys.Errno
		if kind == "fs.write" {
			n, e = x.live().Write(buf)
		} else {
			n, e = x.live().Pwrite(buf, off)
		}
		return nResp{N: int64(n), Errno: errno(e)}
	})
	if !ok {
		return 0, experimentalsys.EIO
	}
	return int(r.N), experimentalsys.Errno(r.Errno)
}

func (x *file) Write(buf []byte) (int, experimentalsys.Errno) { return x.write("fs.write", buf, 0) }
func (x *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	return x.write("fs.pwrite", buf, off)
}

func (x *file) Seek(off int64, whence int) (int64, experimentalsys.Errno) {
	r, ok := do(x.fs.b, "fs.seek", seekReq{H: x.h, Off: off, Whence: whence}, func() nResp {
		n, e := x.live().Seek(off, whence)
		return nResp{N: n, Errno: errno(e)}
	})
	if !ok {
		return 0, experimentalsys.EIO
	}
	if off == 0 && whence == io.SeekStart && r.Errno == 0 {
		x.listed(-1) // a directory rewound
	}
	return r.N, experimentalsys.Errno(r.Errno)
}

func (x *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	r, ok := do(x.fs.b, "fs.readdir", readReq{H: x.h, N: n}, func() direntsResp {
		ds, e := x.live().Readdir(n)
		out := make([]direntRec, len(ds))
		for i, d := range ds {
			out[i] = direntRec{Ino: d.Ino, Name: d.Name, Type: uint32(d.Type)}
		}
		return direntsResp{Ents: out, Errno: errno(e)}
	})
	if !ok {
		return nil, experimentalsys.EIO
	}
	x.listed(int64(len(r.Ents)))
	out := make([]experimentalsys.Dirent, len(r.Ents))
	for i, d := range r.Ents {
		out[i] = experimentalsys.Dirent{Ino: d.Ino, Name: d.Name, Type: fs.FileMode(d.Type)}
	}
	return out, experimentalsys.Errno(r.Errno)
}

func (x *file) simple(kind string, write bool, live func(hostFile) experimentalsys.Errno) experimentalsys.Errno {
	if write {
		if e := x.fs.decide(x.path, true); e != 0 {
			return e
		}
	}
	r, ok := do(x.fs.b, kind, hReq{H: x.h}, func() errResp { return errResp{Errno: errno(live(x.live()))} })
	if !ok {
		return experimentalsys.EIO
	}
	return experimentalsys.Errno(r.Errno)
}

func (x *file) Truncate(size int64) experimentalsys.Errno {
	if e := x.fs.decide(x.path, true); e != 0 {
		return e
	}
	r, ok := do(x.fs.b, "fs.truncate", []any{x.h, size}, func() errResp { return errResp{Errno: errno(x.live().Truncate(size))} })
	if !ok {
		return experimentalsys.EIO
	}
	return experimentalsys.Errno(r.Errno)
}

func (x *file) Sync() experimentalsys.Errno {
	return x.simple("fs.sync", false, func(f hostFile) experimentalsys.Errno { return f.Sync() })
}

func (x *file) Datasync() experimentalsys.Errno {
	return x.simple("fs.datasync", false, func(f hostFile) experimentalsys.Errno { return f.Datasync() })
}

func (x *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	if e := x.fs.decide(x.path, true); e != 0 {
		return e
	}
	r, ok := do(x.fs.b, "fs.futimens", []any{x.h, atim, mtim}, func() errResp { return errResp{Errno: errno(x.live().Utimens(atim, mtim))} })
	if !ok {
		return experimentalsys.EIO
	}
	return experimentalsys.Errno(r.Errno)
}

func (x *file) Close() experimentalsys.Errno {
	e := x.simple("fs.close", false, func(f hostFile) experimentalsys.Errno {
		if f == nil {
			return experimentalsys.EBADF
		}
		return f.Close()
	})
	x.fs.mu.Lock()
	delete(x.fs.files, x.h)
	delete(x.fs.opened, x.h)
	x.fs.mu.Unlock()
	return e
}

// listed counts directory entries handed to the guest (n < 0: rewound).
func (x *file) listed(n int64) {
	x.fs.mu.Lock()
	if o := x.fs.opened[x.h]; o != nil {
		if n < 0 {
			o.dirRead = 0
		} else {
			o.dirRead += n
		}
	}
	x.fs.mu.Unlock()
}

// handles are the guest's open files, live, as a park keeps them: where
// each regular file's position is, how far each directory was listed.
func (f *brokerFS) handles() ([]executor.Handle, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hs := make([]executor.Handle, 0, len(f.opened))
	for h, o := range f.opened {
		hf := f.files[h]
		if hf == nil {
			return nil, 0, fmt.Errorf("open file %d (%s) has no host file", h, o.path)
		}
		x := executor.Handle{H: h, Path: o.path, Flag: o.flag}
		dir, e := hf.IsDir()
		if e != 0 {
			return nil, 0, fmt.Errorf("open file %d (%s): %w", h, o.path, e)
		}
		if dir {
			x.Dir, x.DirRead = true, o.dirRead
		} else if x.Offset, e = hf.Seek(0, io.SeekCurrent); e != 0 {
			return nil, 0, fmt.Errorf("open file %d (%s): its position: %w", h, o.path, e)
		}
		hs = append(hs, x)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].H < hs[j].H })
	return hs, f.nextH, nil
}

// reattach opens on the host, again, the files a continuation's guest
// holds at its park point (the replay served them from the journal), at
// the positions the park kept. They must be the ones the park kept.
func (f *brokerFS) reattach(hs []executor.Handle, next uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(hs) != len(f.opened) {
		return fmt.Errorf("the replay holds %d open files; parked, the run held %d", len(f.opened), len(hs))
	}
	for _, x := range hs {
		o := f.opened[x.H]
		if o == nil || o.path != x.Path || o.flag != x.Flag || (x.Dir && o.dirRead != x.DirRead) {
			return fmt.Errorf("open file %d (%s) is not the one the run held when it parked", x.H, x.Path)
		}
		flag := experimentalsys.Oflag(x.Flag) &^ (experimentalsys.O_CREAT | experimentalsys.O_EXCL | experimentalsys.O_TRUNC)
		hf, e := f.host.open(x.Path, flag, 0)
		if e != 0 {
			return fmt.Errorf("open file %d (%s) cannot be opened again: %w", x.H, x.Path, e)
		}
		f.files[x.H] = hf
		if x.Dir {
			for left := x.DirRead; left > 0; {
				ds, e := hf.Readdir(int(min(left, 256)))
				if e != 0 || len(ds) == 0 {
					return fmt.Errorf("directory %d (%s) has fewer entries than the %d it had listed", x.H, x.Path, x.DirRead)
				}
				left -= int64(len(ds))
			}
		} else if _, e := hf.Seek(x.Offset, io.SeekStart); e != 0 {
			return fmt.Errorf("open file %d (%s): back to offset %d: %w", x.H, x.Path, x.Offset, e)
		}
	}
	f.nextH = next
	return nil
}

// virtualDir is an ancestor of a grant that no grant covers: a read-only
// directory listing only the names that lead to grants.
type virtualDir struct {
	experimentalsys.UnimplementedFile
	fs   *brokerFS
	path string
	read bool
}

func virtualStat(p string) sys.Stat_t {
	return sys.Stat_t{Mode: fs.ModeDir | 0o555, Nlink: 2, Ino: sys.Inode(addr.Of([]byte(p))[0]) + 1}
}

func (d *virtualDir) Dev() (uint64, experimentalsys.Errno)    { return 0, 0 }
func (d *virtualDir) Ino() (sys.Inode, experimentalsys.Errno) { return virtualStat(d.path).Ino, 0 }
func (d *virtualDir) IsDir() (bool, experimentalsys.Errno)    { return true, 0 }
func (d *virtualDir) Stat() (sys.Stat_t, experimentalsys.Errno) {
	return virtualStat(d.path), 0
}
func (d *virtualDir) Close() experimentalsys.Errno { return 0 }

func (d *virtualDir) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if d.read {
		return nil, 0
	}
	d.read = true
	var out []experimentalsys.Dirent
	for _, name := range d.fs.virt[d.path] {
		out = append(out, experimentalsys.Dirent{Name: name, Type: fs.ModeDir})
	}
	return out, 0
}

// Seek to 0 rewinds the listing, as a directory stream does.
func (d *virtualDir) Seek(off int64, whence int) (int64, experimentalsys.Errno) {
	if off == 0 && whence == 0 {
		d.read = false
		return 0, 0
	}
	return 0, experimentalsys.EINVAL
}
