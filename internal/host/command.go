package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	images "github.com/opensubstrate/sandbox/internal/image"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/tier"
)

// The Cpu grant a run gets when it names none: a WASM unit's fuel
// budget, and, for a native unit, more than the default one-minute
// deadline lets a few cores spend (2 CPUs × 4 W × 60 s = 480 J here).
const (
	DefaultCPU       = "cpu:50J"
	DefaultNativeCPU = "cpu:1kJ"
)

// DefaultPath is the PATH a native unit gets, and where its command is
// looked up: the system directories every run sees.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SystemDirs are the host directories every native run sees, read-only.
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt"}

// CommandLine is a unit as a person gives it: a command line, an
// environment, grants, and the directory it was given in.
type CommandLine struct {
	Args   []string // a WASM module's path or a command, then its arguments
	Env    map[string]string
	Grants grant.Set
	// Cwd resolves relative paths; a native run starts in it when a
	// storage grant covers it. Default: this process's.
	Cwd string
	// RootDir is the image root filesystem a native command runs in: it
	// is looked up there (outside storage grants), not on the host.
	RootDir string
	// Read reads a host file the unit is made from (a module, a
	// program, a VM image's manifest); nil: any regular file (the
	// operator's command line). A service gives its caller's
	// (Host.Reader), which reads only what the caller may grant.
	Read func(path string) ([]byte, error)
	// Look says whether the caller may learn that a host file is there
	// (nil: any): a command looked up in the run's PATH is looked for
	// only where it may, so that a PATH naming another's directory
	// tells nothing of it. A service gives its caller's (Host.Looker).
	Look func(path string) error
	// Image says whether the caller may run in an image root filesystem
	// (nil: any), asked as the image is found (Host.ResolveImage), before
	// the program is looked for in it: a service gives its caller's
	// (Host.ImageChecker), so that nothing of an image it may not use
	// (that it is there, its ID, which programs it holds) is told.
	Image func(root addr.Addr) error
}

// Command makes a request from a command line: a WebAssembly module (by
// its magic number) or a native program, found the way the run will see
// it (PATH, the system directories, its storage grants), with the
// default environment of a native unit (PATH, HOME, LANG) and the default
// Cpu grant when it names none. The request's grants are the command
// line's with that default; the caller sets the rest (streams, tier,
// limits).
func Command(c CommandLine) (Request, error) {
	if len(c.Args) == 0 {
		return Request{}, &ProgramError{NotFound: true, Err: errors.New("no command given")}
	}
	cwd := c.Cwd
	if cwd == "" {
		var err error
		if cwd, err = os.Getwd(); err != nil {
			return Request{}, err
		}
	}
	env := map[string]string{}
	for k, v := range c.Env {
		env[k] = v
	}
	read, sniff := c.Read, true
	if read == nil {
		// The operator's: a module or a VM image is the host's file;
		// a native program is read as the run will find it (below).
		read = readRegular
	} else if n := c.Args[0]; !strings.Contains(n, "/") && !strings.HasSuffix(n, ".wasm") {
		// A caller whose reads are checked names a module or an image
		// by its path (or a module by its .wasm name): a bare command
		// name is looked up in PATH, never read from a directory it may
		// not read.
		sniff = false
	}
	req, err := command(c.Args, env, c.Grants, cwd, c.RootDir, read, c.Read == nil, c.Look, sniff)
	if err != nil {
		return Request{}, err
	}
	if req.Grants, err = WithDefaultCPU(c.Grants, req.Kind); err != nil {
		return Request{}, err
	}
	return req, nil
}

// WithDefaultCPU is g, or, where g names no Cpu grant, g with the default
// for a unit of kind (a copy: not the caller's).
func WithDefaultCPU(g grant.Set, kind tier.Kind) (grant.Set, error) {
	if _, ok := g.Budget(device.CPU); ok {
		return g, nil
	}
	// Every unit runs on a CPU: a run that names no Cpu grant (none at
	// all, or only gpu:…) gets the default.
	def := DefaultCPU
	if kind == tier.Native {
		def = DefaultNativeCPU
	}
	g = g.Clone()
	if err := g.Parse(def, "/"); err != nil {
		return g, err
	}
	return g, g.Normalize()
}

// readOpened reads f, the file opened at path, if it is a regular file
// (at most MaxRead bytes: a sparse file may say terabytes), and closes
// it.
func readOpened(f *os.File, path string) ([]byte, error) {
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &ProgramError{Err: fmt.Errorf("%s is not a regular file", path)}
	}
	return readBounded(f, path)
}

// readAll reads f, a regular file, to its end: at most limit bytes and
// one more (so that a caller can tell a file over limit), into a buffer
// of the size the file says it has (up to maxSizeHint, past which it
// grows as it must), not one doubled again and again from 512 bytes
// (io.ReadAll: python3's 6.8 MB took a tenth of a service's CPU in
// copies, zeroing and collection).
func readAll(f *os.File, limit int64) ([]byte, error) {
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = min(fi.Size(), limit+1, maxSizeHint)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	_, err := buf.ReadFrom(io.LimitReader(f, limit+1))
	return buf.Bytes(), err
}

// isModule says whether b is a WebAssembly module: it starts with the
// magic number.
func isModule(b []byte) bool { return bytes.HasPrefix(b, []byte("\x00asm")) }

// maxSizeHint bounds what readAll allocates on a file's word: a sparse
// file may say terabytes.
const maxSizeHint = 256 << 20

func command(args []string, env map[string]string, g grant.Set, cwd, rootDir string, read func(string) ([]byte, error), operator bool, look func(string) error, sniff bool) (Request, error) {
	name := args[0]
	mod := name
	if !filepath.IsAbs(mod) {
		mod = filepath.Join(cwd, mod)
	}
	b, err := []byte(nil), error(fs.ErrNotExist)
	// In an image's root, a path no storage grant covers is the image's
	// file, not the host's: the host's is not read (not sniffed as a
	// module, not refused as a host path the caller may not read).
	if sniff && (rootDir == "" || underGrant(mod, g)) {
		b, err = read(mod)
	}
	// What was read to sniff is the program when the command is that
	// file: it is not read (and hashed later) twice.
	sniffed := []byte(nil)
	if err == nil {
		sniffed = b
	}
	if errors.Is(err, grant.ErrDenied) {
		// A path the caller may not have read: refused before the host
		// says whether anything is there.
		return Request{}, err
	}
	if err == nil && isModule(b) {
		return Request{Kind: tier.Wasm, Image: b, Entry: filepath.Base(name), Args: append([]string{filepath.Base(name)}, args[1:]...), Env: env}, nil
	} else if err == nil && strings.HasSuffix(name, ".wasm") {
		return Request{}, &ProgramError{Err: fmt.Errorf("%s is not a WebAssembly module: it does not start with the magic number \\0asm", name)}
	} else if err == nil && bytes.Contains(b, []byte(`"`+boot.Type+`"`)) {
		// A VM image: the unit is its manifest, and the command after it
		// is the program its guest runs, from its own root.
		if _, err := boot.ParseManifest(b); err != nil {
			return Request{}, &ProgramError{Err: fmt.Errorf("%s: %w", name, err)}
		}
		if len(args) < 2 || !filepath.IsAbs(args[1]) {
			return Request{}, &InvalidError{Err: fmt.Errorf("%s is a VM image: give the program its guest runs after it, as an absolute path in the guest (e.g. %s/sh)", name, boot.ToolDir)}
		}
		if _, ok := env["PATH"]; !ok {
			env["PATH"] = boot.ToolDir + ":" + DefaultPath
		}
		return Request{Kind: tier.VM, Image: b, Entry: args[1], Args: args[1:], Env: env}, nil
	}
	for k, v := range map[string]string{"PATH": DefaultPath, "HOME": "/tmp", "LANG": "C.UTF-8"} {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	var image []byte
	path, err := resolveCommand(name, env["PATH"], cwd, rootDir, g, operator, look)
	if err != nil {
		return Request{}, err
	}
	if !filepath.IsAbs(path) {
		// The entry a run executes is the file that was read, wherever
		// it stands: never a path relative to it.
		return Request{}, &InvalidError{Err: fmt.Errorf("%s resolves to %s, not an absolute path: give the working directory as an absolute path", name, path)}
	}
	switch {
	case rootDir != "" && !underGrant(path, g):
		image, err = readInRoot(rootDir, path, g)
		if err == nil && isModule(image) {
			return Request{}, &InvalidError{Err: fmt.Errorf("%s in the image is a WebAssembly module: an image's root filesystem is for native programs (drop --image)", path)}
		}
	case !Visible(path, g):
		return Request{}, &InvalidError{Err: fmt.Errorf("%s is not visible inside a native run: it is neither in a system directory (/usr, /bin, /sbin, /lib, /etc, /opt) nor under a storage grant; grant its directory with --grant fs:%s:ro", path, filepath.Dir(path))}
	case sniffed != nil && path == mod && sameInRun(rootDir, path, g, look) == nil:
		// What was sniffed is the file the run will find there.
		image = sniffed
	case operator || inSystemDirs(path) && !underGrant(path, g):
		// Read as the run will find it: a link on the way (one a guest
		// planted in a grant, or in a system directory runs may write)
		// leads where it leads in the run, never to the host's file of
		// that name, nor through a host directory the run does not see.
		image, err = readInRun(rootDir, path, g, look)
	default:
		// The caller's reader reads the host's file under a grant
		// (following no link): only if the run will find that very file
		// there.
		if image, err = read(path); err == nil {
			err = sameInRun(rootDir, path, g, look)
		}
	}
	if err != nil {
		return Request{}, err
	}
	dir := ""
	for _, st := range g.Storage {
		if grant.Within(st.Path, cwd) {
			dir = cwd
		}
	}
	return Request{Kind: tier.Native, Image: image, Entry: path, Args: append([]string{name}, args[1:]...), Env: env, Dir: dir}, nil
}

// resolveCommand finds a command as the run will: a path (relative to the
// current directory) or a name looked up in PATH; in an image's root
// filesystem (rootDir) where no storage grant covers the path. Where
// look is not nil, a host file is looked for as the caller's reader
// would reach it (statLooked): one it may not read, or reached through
// a link it planted, is as if it were not there; for the operator
// (operator, look nil), a file the run sees is looked for as the run will
// find it (statInRun).
func resolveCommand(name, path, cwd, rootDir string, g grant.Set, operator bool, look func(string) error) (string, error) {
	hostStat := os.Stat
	if look != nil {
		hostStat = func(p string) (fs.FileInfo, error) {
			if inSystemDirs(p) && !underGrant(p, g) {
				// As the run will find it (statInRun), as it is read.
				return statInRun(rootDir, p, g, look)
			}
			return statLooked(p, look)
		}
	} else if operator {
		// The operator's: a file the run sees is looked for as the run
		// will find it (statInRun); any other as the host has it, to be
		// refused as not visible, naming the grant it needs.
		hostStat = func(p string) (fs.FileInfo, error) {
			if Visible(p, g) {
				return statInRun(rootDir, p, g, nil)
			}
			return os.Stat(p)
		}
	}
	stat := hostStat
	if rootDir != "" {
		stat = func(p string) (fs.FileInfo, error) {
			if underGrant(p, g) {
				return hostStat(p)
			}
			return statInRoot(rootDir, p, g)
		}
	}
	if strings.Contains(name, "/") {
		// Clean: what is looked at is what is read and run
		// (/app/../G/x is /G/x, in the image or under a grant alike).
		p := filepath.Clean(name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		fi, err := stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return "", &ProgramError{NotFound: true, Err: fmt.Errorf("%s: no such file", p)}
		}
		if pe := (*ProgramError)(nil); errors.As(err, &pe) {
			return "", err
		}
		if err != nil {
			return "", &ProgramError{Err: err}
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", &ProgramError{Err: fmt.Errorf("%s is not an executable file", p)}
		}
		return filepath.Clean(p), nil
	}
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			// An empty or relative entry names a directory relative to
			// where a process stands, which is not where this host
			// looks (nor, in an image, the root it looks in): skipped,
			// as Go's exec.LookPath refuses a program found through ".".
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &ProgramError{NotFound: true, Err: fmt.Errorf("%s: no such command in the run's PATH (%s)", name, path)}
}

// underGrant says whether p is at or under one of g's storage grants.
func underGrant(p string, g grant.Set) bool {
	for _, st := range g.Storage {
		if grant.Within(st.Path, p) {
			return true
		}
	}
	return false
}

// runsOwn are the directories a run in an image has of its own, never
// the image's: those image.Top leaves out of its root (image.RunsOwn),
// and those the S1 backend binds over it (native.GPULibDir, the host's
// driver libraries with a device grant; the directory of native.CAPath,
// egress's CA), which the engine names here without importing the
// backend (TestRunsOwnHasTheBackendsBinds holds them equal).
var runsOwn = append(slices.Clone(images.RunsOwn), "/nvidia/lib", "/run/sandbox")

// inRoot opens p, as a run sees it, in the image root filesystem at
// rootDir, following the image's links as the run will (image.Walk). It
// refuses a path that is, or is led by the image's links, into a
// directory the run has of its own (runsOwn) or under one of g's storage
// grants, which the run sees as the host's: the image's copy there is
// not what the run would find.
func inRoot(rootDir, p string, g grant.Set) (*os.File, error) {
	f, err := images.Walk(rootDir, p, func(at string, linked bool) error {
		where := ""
		for _, k := range runsOwn {
			if grant.Within(k, at) {
				where = "a run has its own " + k + ", not the image's: nothing there runs"
			}
		}
		for _, st := range g.Storage {
			if grant.Within(st.Path, at) {
				where = "the run sees the storage grant " + st.Path + " there, not the image's: name the program under the grant"
			}
		}
		switch {
		case where == "":
			return nil
		case linked:
			return &ProgramError{Err: fmt.Errorf("%s: the image's links lead it to %s, and %s", p, at, where)}
		default:
			return &ProgramError{Err: fmt.Errorf("%s: %s", p, where)}
		}
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no such file in the image: %w", p, fs.ErrNotExist)
	}
	return f, err
}

func statInRoot(rootDir, p string, g grant.Set) (fs.FileInfo, error) {
	f, err := inRoot(rootDir, p, g)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

func readInRoot(rootDir, p string, g grant.Set) ([]byte, error) {
	f, err := inRoot(rootDir, p, g)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, &ProgramError{Err: fmt.Errorf("%s in the image is not a regular file", p)}
	}
	return readBounded(f, p)
}

// Visible says whether a native run sees the host path p: in a system
// directory, or under a storage grant.
func Visible(p string, g grant.Set) bool {
	return inSystemDirs(p) || underGrant(p, g)
}

// ProgramError is a program that cannot be run as given: not found, or
// found but not executable. Its message says which and why.
type ProgramError struct {
	NotFound bool
	Err      error
}

func (e *ProgramError) Error() string { return e.Err.Error() }
func (e *ProgramError) Unwrap() error { return e.Err }

// Invalid: a program that cannot be run is bad input.
func (e *ProgramError) Invalid() bool { return true }

// InvalidError is a request that cannot be run as given.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

// Invalid: bad input.
func (e *InvalidError) Invalid() bool { return true }

// CommandIn is Command in the root filesystem of the imported image ref
// ("": the host's system directories): the program is found in the
// image, the image's environment is the default (the command line's
// wins), its working directory the run's where none is granted, and the
// request's Root names the root filesystem, which the unit binds.
func (h *Host) CommandIn(ref string, c CommandLine) (Request, error) {
	if ref == "" {
		return Command(c)
	}
	img, err := h.ResolveImage(ref, c.Image)
	if err != nil {
		return Request{}, err
	}
	if c.RootDir, err = h.Images.RootDir(img.Root); err != nil {
		return Request{}, err
	}
	env := EnvMap(img.Config.Env)
	for k, v := range c.Env {
		env[k] = v
	}
	c.Env = env
	req, err := Command(c)
	if err != nil {
		return req, err
	}
	if req.Kind != tier.Native {
		what := "a WebAssembly module"
		if req.Kind == tier.VM {
			what = "a VM image"
		}
		return Request{}, &InvalidError{Err: fmt.Errorf("%s is %s: an image's root filesystem is for native programs (drop --image)", c.Args[0], what)}
	}
	req.Root = img.Root
	if req.Dir == "" && img.Config.WorkingDir != "" && filepath.IsAbs(img.Config.WorkingDir) {
		req.Dir = filepath.Clean(img.Config.WorkingDir)
	}
	return req, nil
}

// ResolveImage finds the image ref names for a caller that may run in
// the image roots may admits (nil: any, the operator). To the caller, an
// image it may not use is not there (image.Store.ResolveAmong): not found
// alike whether it exists or not, its ID told by no refusal and counted
// by no prefix. The operator's log still has the refusal.
func (h *Host) ResolveImage(ref string, may func(root addr.Addr) error) (images.Image, error) {
	if may == nil {
		return h.Images.Resolve(ref)
	}
	img, err := h.Images.ResolveAmong(ref, func(i images.Image) bool { return may(i.Root) == nil })
	if nf := (*images.NotFoundError)(nil); errors.As(err, &nf) {
		// The operator's log has what the caller was not told: the
		// refusal of the image the ref names, or of each where it names
		// several (a prefix of their IDs), none of which it may use.
		theirs, e := h.Images.Resolve(ref)
		if e == nil {
			h.refused(may(theirs.Root))
		} else if amb := (*images.AmbiguousError)(nil); errors.As(e, &amb) {
			for _, theirs := range amb.Images {
				h.refused(may(theirs.Root))
			}
		}
	}
	return img, err
}

// ErrLimit is wrapped when a request is over a limit of the host (too
// many sandboxes, a file too large).
var ErrLimit = errors.New("over a limit")

// LimitError is a request over one of the host's limits.
type LimitError struct{ What string }

func (e *LimitError) Error() string { return fmt.Sprintf("%v: %s", ErrLimit, e.What) }
func (e *LimitError) Unwrap() error { return ErrLimit }

// Limit puts it in the limit category (HTTP 429).
func (e *LimitError) Limit() bool { return true }

// EnvMap is a NAME=VALUE list as a map.
func EnvMap(l []string) map[string]string {
	m := map[string]string{}
	for _, kv := range l {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}
