//go:build linux

package native

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/tier"
	"golang.org/x/sys/unix"
)

// ErrExecControlRootless refuses exec grants where they cannot be
// enforced: fanotify permission events, the layer on the kernel's exec
// path, need sandbox to run as root. It is a tier.ErrUnavailable.
var ErrExecControlRootless error = rootlessError{}

type rootlessError struct{}

func (rootlessError) Error() string {
	return "S1 exec control (exec:allow and exec:deny grants) needs fanotify permission events, which need sandbox to run as root; run as root or drop the exec grants"
}

func (rootlessError) Unwrap() error { return tier.ErrUnavailable }

// fileAddr is the content address of the regular file open at fd (which
// init passed), cached by the file's identity and times.
func (e *Executor) fileAddr(fd int) (addr.Addr, error) {
	k, err := s1init.Identity(fd)
	if err != nil {
		return addr.Addr{}, err
	}
	e.addrMu.Lock()
	a, ok := e.addrs[k]
	e.addrMu.Unlock()
	if ok {
		return a, nil
	}
	a, err = addr.OfReader(io.NewSectionReader(preader(fd), 0, k.Size))
	if err != nil {
		return addr.Addr{}, err
	}
	e.addrMu.Lock()
	if e.addrs == nil || len(e.addrs) > 1<<14 {
		e.addrs = map[s1init.FileKey]addr.Addr{}
	}
	e.addrs[k] = a
	e.addrMu.Unlock()
	return a, nil
}

// preader reads a descriptor at offsets, leaving its position alone.
type preader int

func (p preader) ReadAt(b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(p), b, off)
	if err != nil {
		return 0, err
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// loaderGlobs find the system's ELF loaders (glibc's and musl's), whose
// addresses exec control knows: a loader is run only as the interpreter
// of an admitted program, whatever it is called.
var loaderGlobs = []string{
	"/lib64/ld-linux*.so*", "/lib/ld-linux*.so*", "/lib/*-linux-gnu*/ld-linux*.so*", "/usr/lib/*-linux-gnu*/ld-linux*.so*",
	"/usr/lib64/ld-linux*.so*", "/lib/ld-musl-*.so*", "/usr/lib/ld-musl-*.so*", "/lib/ld64.so*", "/lib64/ld64.so*",
}

// loaderAddrs hashes the system's ELF loaders, once per executor; or,
// for a run in an image's root filesystem at root, the image's (each
// path resolved inside the root, as the run resolves it).
func (e *Executor) loaderAddrs(root string) map[addr.Addr]bool {
	if root != "" {
		return loadersIn(e, root)
	}
	e.loadersOnce.Do(func() { e.loaders = loadersIn(e, "") })
	return e.loaders
}

func loadersIn(e *Executor, root string) map[addr.Addr]bool {
	out := map[addr.Addr]bool{}
	for _, g := range loaderGlobs {
		ms, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range ms {
			var f *os.File
			var err error
			if root == "" {
				f, err = os.Open(m)
			} else {
				f, err = image.Open(root, strings.TrimPrefix(m, root))
			}
			if err != nil {
				continue
			}
			if a, err := e.fileAddr(int(f.Fd())); err == nil {
				out[a] = true
			}
			f.Close()
		}
	}
	return out
}

// execControl turns on exec control for a run whose grants have exec
// lists: init holds every exec and asks; the run's Enforcer answers and
// logs each decision. A file whose address is an ELF loader's (the
// system's, or one a program named as its PT_INTERP in this run) is
// admitted only in the role of that loader; run directly (any name, any
// path) it is refused: it would load its operand without an exec the
// kernel could check.
func (e *Executor) execControl(set grant.Set, enf *grant.Enforcer, ex *s1init.Exec, root string) (func(s1init.Ctl) s1init.Ctl, error) {
	if len(set.Exec.Allow) == 0 && len(set.Exec.Deny) == 0 {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, ErrExecControlRootless
	}
	ex.ExecControl = true
	denied := map[addr.Addr]bool{}
	for _, d := range set.Exec.Deny {
		denied[d] = true
	}
	var mu sync.Mutex
	loaders := maps.Clone(e.loaderAddrs(root))
	return func(m s1init.Ctl) s1init.Ctl {
		v := s1init.Ctl{Op: "verdict"}
		a, err := addr.Parse(m.Addr)
		if m.Op != "exec" || err != nil {
			return v
		}
		name := m.Path
		if m.Role != "" && m.Role != s1init.RoleProgram {
			name += " (" + m.Role + ")"
		}
		mu.Lock()
		if m.Role == s1init.RoleLoader {
			loaders[a] = true
		}
		v.Loader = loaders[a]
		mu.Unlock()
		switch {
		case m.Role == s1init.RoleLoader && !denied[a]:
			// The loader an allowed program names is part of running it.
			enf.Note(grant.KindExec, grant.OpExec, a.String()+" "+name, true, "the ELF loader of an allowed program")
			v.Allow = true
		case v.Loader && m.Role != s1init.RoleScript:
			enf.Note(grant.KindExec, grant.OpExec, a.String()+" "+name, false, "the ELF loader run directly: under exec control it runs only as the interpreter of an admitted program")
		default:
			v.Allow = enf.Exec(a, name) == nil
		}
		return v
	}, nil
}
