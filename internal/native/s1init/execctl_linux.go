//go:build linux

package s1init

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// execCtl is init's exec control. Two layers judge every exec by the
// BLAKE3 of the file, the host deciding (its Enforcer, its decision log):
//
//   - seccomp user notification holds each execve and execveat while the
//     file, the interpreter its #! line names, and the file an
//     interpreter is invoked on are judged; a refusal fails the call with
//     EACCES. It reads the path and argv from the caller's memory, which
//     another of its threads could change after the check: this layer
//     gives the errno and the judgement of scripts, not the guarantee.
//   - fanotify's FAN_OPEN_EXEC_PERM on every mount of the run is the
//     guarantee: the kernel holds the open it is about to execute (the
//     program, a #! interpreter, an ELF loader) until init answers, and
//     init hashes that very file. What the first layer missed is refused
//     there, with EPERM.
type execCtl struct {
	// ask sends a question with the open file (the host hashes it:
	// init carries no hash of its own) and returns the verdict, which
	// names the file's address; false when there is no answer.
	ask func(q Ctl, fd int) (Ctl, bool)

	mu       sync.Mutex
	verdicts map[string]bool    // addr → the host's answer
	loaders  map[string]bool    // ELF loaders of allowed programs
	isLoader map[string]bool    // addr → the host knows it as an ELF loader
	addrs    map[FileKey]string // file identity → addr
	heads    map[FileKey]head   // what a file's first bytes say
	// pending is, by thread, the ELF loader the kernel is about to open
	// for the program that thread's exec just opened: the one open of a
	// loader for exec that is admitted (a loader run directly is not).
	pending map[int]string
}

// head is what exec control reads from the start of a file: the ELF
// loader it names, or the interpreter of its #! line.
type head struct {
	loader  string
	interp  string
	isShell bool
}

// headOf reads (once per file version) the loader and #! line of fd.
func (c *execCtl) headOf(fd int) head {
	k, err := Identity(fd)
	if err == nil {
		c.mu.Lock()
		h, ok := c.heads[k]
		c.mu.Unlock()
		if ok {
			return h
		}
	}
	var h head
	h.loader = elfInterp(fd)
	h.interp, h.isShell = shebang(fd)
	if err == nil {
		c.mu.Lock()
		c.heads[k] = h
		c.mu.Unlock()
	}
	return h
}

func newExecCtl(ask func(Ctl, int) (Ctl, bool)) *execCtl {
	return &execCtl{ask: ask, verdicts: map[string]bool{}, loaders: map[string]bool{}, isLoader: map[string]bool{}, addrs: map[FileKey]string{}, heads: map[FileKey]head{}, pending: map[int]string{}}
}

// hostAsker asks the host over the control socket, one question at a
// time, passing the open file along; no answer is a refusal.
func hostAsker() func(Ctl, int) (Ctl, bool) {
	var mu sync.Mutex
	buf := make([]byte, 4096)
	return func(q Ctl, fd int) (Ctl, bool) {
		mu.Lock()
		defer mu.Unlock()
		q.Op = "exec"
		b, _ := json.Marshal(q)
		if err := unix.Sendmsg(ctlFD, b, unix.UnixRights(fd), nil, 0); err != nil {
			return Ctl{}, false
		}
		for {
			n, err := unix.Read(ctlFD, buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return Ctl{}, false
			}
			var v Ctl
			if json.Unmarshal(buf[:n], &v) != nil || v.Op != "verdict" {
				return Ctl{}, false
			}
			return v, true
		}
	}
}

// Identity is the FileKey of the regular file open at fd; anything else
// is an error.
func Identity(fd int) (FileKey, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileKey{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return FileKey{}, errors.New("not a regular file")
	}
	return FileKey{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, nil
}

// known is the address the host gave for this version of the file.
func (c *execCtl) known(fd int) (string, bool) {
	k, err := Identity(fd)
	if err != nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.addrs[k]
	return a, ok
}

// judge asks the host about the file open at fd, in a role, and keeps
// the answer. Anything but a regular file is refused.
func (c *execCtl) judge(fd int, path, role string) (allow bool, addr string) {
	k, err := Identity(fd)
	if err != nil {
		return false, ""
	}
	v, ok := c.ask(Ctl{Path: path, Role: role}, fd)
	if !ok || v.Addr == "" {
		return false, ""
	}
	c.mu.Lock()
	c.addrs[k] = v.Addr
	if v.Loader {
		c.isLoader[v.Addr] = true
	}
	if role == RoleLoader {
		c.loaders[v.Addr] = v.Allow
	} else {
		c.verdicts[v.Addr] = v.Allow
	}
	c.mu.Unlock()
	return v.Allow, v.Addr
}

// --- the seccomp layer ---

type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// loadExecNotify installs, on the calling thread, a filter that hands
// every execve and execveat to a listener, and returns the listener.
func loadExecNotify() (int, error) {
	arch, err := auditArch()
	if err != nil {
		return -1, fmt.Errorf("exec control: %w", err)
	}
	f := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4}, // arch
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: arch, Jt: 0, Jf: 4},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_EXECVE, Jt: 2, Jf: 0},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_EXECVEAT, Jt: 1, Jf: 0},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_USER_NOTIF},
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	fd, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(f)
	if e != 0 {
		return -1, fmt.Errorf("exec control: seccomp listener: %w", e)
	}
	return int(fd), nil
}

// serveNotify answers exec notifications until the listener fails.
func (c *execCtl) serveNotify(fd int) {
	for {
		var req seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); e != 0 {
			if e == unix.EINTR || e == unix.ENOENT {
				continue
			}
			return
		}
		resp := seccompNotifResp{ID: req.ID}
		if c.judgeCall(fd, &req) {
			resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		} else {
			resp.Error = -int32(unix.EACCES)
		}
		unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}

// judgeCall decides one held execve/execveat. Whatever it cannot read
// or open it lets through to the kernel, whose exec path the fanotify
// layer guards.
func (c *execCtl) judgeCall(listener int, req *seccompNotif) bool {
	pid := int(req.Pid)
	a := req.Data.Args
	dirfd, pathPtr, argvPtr, flags := unix.AT_FDCWD, a[0], a[1], uint64(0)
	if req.Data.Nr == unix.SYS_EXECVEAT {
		dirfd, pathPtr, argvPtr, flags = int(int32(a[0])), a[1], a[2], a[4]
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return true
	}
	defer mem.Close()
	path, err := readString(mem, pathPtr)
	if err != nil {
		return true
	}
	argv := readArgv(mem, argvPtr)
	// The caller may have died and its pid been reused while we read.
	id := req.ID
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id))); e != 0 {
		return true
	}
	fd, err := guestOpen(pid, dirfd, path, flags&unix.AT_EMPTY_PATH != 0, flags&unix.AT_SYMLINK_NOFOLLOW != 0)
	if err != nil {
		return true // the kernel fails the exec itself; its exec path is guarded
	}
	defer unix.Close(fd)
	return c.judgeProgram(fd, displayPath(fd, path), pid, argv, 0)
}

// judgeProgram judges an exec'd file, then what it brings: its ELF
// loader (admitted with it), its #! interpreter (judged), and, for an
// interpreter, the file it is invoked on (judged).
func (c *execCtl) judgeProgram(fd int, path string, pid int, argv []string, depth int) bool {
	role := RoleProgram
	if depth > 0 {
		role = RoleInterpreter
	}
	if ok, _ := c.judge(fd, path, role); !ok {
		return false
	}
	h := c.headOf(fd)
	if l := h.loader; l != "" {
		// The loader the kernel will open for this program: admitted with
		// it unless denied outright (the host decides, and logs it).
		if lfd, err := guestOpen(pid, unix.AT_FDCWD, l, false, false); err == nil {
			la, ok := c.known(lfd)
			c.mu.Lock()
			_, decided := c.loaders[la]
			c.mu.Unlock()
			if !ok || !decided {
				c.judge(lfd, l, RoleLoader)
			}
			unix.Close(lfd)
		}
	}
	if interp, ok := h.interp, h.isShell; ok && depth < 4 {
		ifd, err := guestOpen(pid, unix.AT_FDCWD, interp, false, false)
		if err != nil {
			return true // the kernel will fail the exec itself
		}
		defer unix.Close(ifd)
		return c.judgeProgram(ifd, interp, pid, nil, depth+1)
	}
	if file := scriptArg(filepath.Base(path), argv); file != "" {
		sfd, err := guestOpen(pid, unix.AT_FDCWD, file, false, false)
		if err != nil {
			return true // not a file: the interpreter will say so
		}
		defer unix.Close(sfd)
		var st unix.Stat_t
		if unix.Fstat(sfd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return true
		}
		ok, _ := c.judge(sfd, file, RoleScript)
		return ok
	}
	return true
}

// displayPath is where the open file is, for the log.
func displayPath(fd int, fallback string) string {
	if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
		return p
	}
	return fallback
}

// readString reads a NUL-terminated string of at most PATH_MAX bytes.
func readString(mem *os.File, at uint64) (string, error) {
	if at == 0 {
		return "", nil
	}
	buf := make([]byte, 4096)
	n, err := mem.ReadAt(buf, int64(at))
	if n == 0 && err != nil {
		return "", err
	}
	if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
		return string(buf[:i]), nil
	}
	return "", errors.New("unterminated or overlong path")
}

// readArgv reads up to 256 arguments.
func readArgv(mem *os.File, at uint64) []string {
	var out []string
	for i := 0; at != 0 && i < 256; i++ {
		var p [8]byte
		if _, err := mem.ReadAt(p[:], int64(at)+int64(8*i)); err != nil {
			break
		}
		ptr := uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 | uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
		if ptr == 0 {
			break
		}
		s, err := readString(mem, ptr)
		if err != nil {
			break
		}
		out = append(out, s)
	}
	return out
}

// elfInterp is the PT_INTERP of an ELF file, "" for none or for
// anything malformed. (A few lines instead of debug/elf, which would
// add milliseconds to every run's start for its compression tables.)
func elfInterp(fd int) string {
	var h [64]byte
	if n, _ := unix.Pread(fd, h[:], 0); n < 52 || string(h[:4]) != "\x7fELF" {
		return ""
	}
	var bo binary.ByteOrder
	switch h[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return ""
	}
	var phoff uint64
	var phentsize, phnum uint16
	switch h[4] {
	case 1: // ELF32
		phoff, phentsize, phnum = uint64(bo.Uint32(h[0x1c:])), bo.Uint16(h[0x2a:]), bo.Uint16(h[0x2c:])
		if phentsize < 32 {
			return ""
		}
	case 2: // ELF64
		phoff, phentsize, phnum = bo.Uint64(h[0x20:]), bo.Uint16(h[0x36:]), bo.Uint16(h[0x38:])
		if phentsize < 56 {
			return ""
		}
	default:
		return ""
	}
	if phnum > 512 || phoff > 1<<40 {
		return ""
	}
	ph := make([]byte, phentsize)
	for i := uint64(0); i < uint64(phnum); i++ {
		if n, _ := unix.Pread(fd, ph, int64(phoff+i*uint64(phentsize))); n < len(ph) {
			return ""
		}
		if bo.Uint32(ph[0:]) != 3 { // PT_INTERP
			continue
		}
		var off, size uint64
		if h[4] == 1 {
			off, size = uint64(bo.Uint32(ph[4:])), uint64(bo.Uint32(ph[16:]))
		} else {
			off, size = bo.Uint64(ph[8:]), bo.Uint64(ph[32:])
		}
		if size == 0 || size > 4096 || off > 1<<40 {
			return ""
		}
		b := make([]byte, size)
		if n, _ := unix.Pread(fd, b, int64(off)); uint64(n) < size {
			return ""
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}

// shebang is the interpreter a #! line names.
func shebang(fd int) (string, bool) {
	buf := make([]byte, 256)
	n, _ := unix.Pread(fd, buf, 0)
	if n < 3 || buf[0] != '#' || buf[1] != '!' {
		return "", false
	}
	line, _, _ := bytes.Cut(buf[2:n], []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return "", false
	}
	return fields[0], true
}

// interpreters are the programs whose argument names code to run, by
// family: the options that take code inline (no file is then run), and
// those that take a separate value.
var interpreters = []struct {
	family       string
	match        func(string) bool
	inline       string // short options (each letter) meaning "the code is an argument"
	inlineLong   []string
	valued       []string
	fileOptional []string // options whose value is the script
}{
	{"shell", oneOf("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"), "c", nil, []string{"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}, nil},
	{"python", prefix("python"), "cm", nil, []string{"-W", "-X", "-Q"}, nil},
	{"perl", prefix("perl"), "eE", nil, []string{"-I", "-M", "-m"}, nil},
	{"ruby", prefix("ruby"), "e", nil, []string{"-I", "-r", "-E", "-C"}, nil},
	{"node", oneOf("node", "nodejs"), "ep", []string{"--eval", "--print"}, []string{"-r", "--require", "--import", "--loader", "--experimental-loader", "--input-type", "--conditions", "-C"}, nil},
	{"php", prefix("php"), "r", nil, []string{"-d", "-c", "-z"}, []string{"-f"}},
	{"lua", prefix("lua"), "e", nil, []string{"-l"}, nil},
	{"tcl", prefix("tclsh"), "", nil, nil, nil},
	{"awk", oneOf("awk", "gawk", "mawk", "nawk", "busybox-awk"), "", nil, []string{"-v", "-F"}, []string{"-f"}},
	{"loader", func(n string) bool {
		return strings.HasPrefix(n, "ld-linux") || strings.HasPrefix(n, "ld-") && strings.Contains(n, ".so")
	}, "", nil, []string{"--library-path", "--preload", "--argv0", "--audit", "--inhibit-rpath", "--glibc-hwcaps-prepend", "--glibc-hwcaps-mask"}, nil},
}

func oneOf(names ...string) func(string) bool {
	return func(n string) bool {
		for _, x := range names {
			if n == x {
				return true
			}
		}
		return false
	}
}

func prefix(p string) func(string) bool {
	return func(n string) bool {
		if !strings.HasPrefix(n, p) {
			return false
		}
		rest := n[len(p):]
		_, err := strconv.ParseFloat(strings.TrimSuffix(rest, "."), 64)
		return rest == "" || err == nil || strings.Trim(rest, "0123456789.") == ""
	}
}

// scriptArg is the file an interpreter named name is invoked on by argv,
// "" when it is not an interpreter, runs inline code, or reads stdin.
func scriptArg(name string, argv []string) string {
	for _, in := range interpreters {
		if !in.match(name) {
			continue
		}
		for i := 1; i < len(argv); i++ {
			a := argv[i]
			switch {
			case a == "--":
				if i+1 < len(argv) {
					return argv[i+1]
				}
				return ""
			case a == "-":
				return "" // stdin
			case contains(in.fileOptional, a):
				if i+1 < len(argv) {
					return argv[i+1]
				}
				return ""
			case contains(in.inlineLong, a) || strings.HasPrefix(a, "--eval=") || strings.HasPrefix(a, "--print="):
				return ""
			case contains(in.valued, a):
				i++
			case strings.HasPrefix(a, "--") || strings.HasPrefix(a, "+"):
			case strings.HasPrefix(a, "-") && len(a) > 1:
				if in.inline != "" && strings.ContainsAny(a[1:], in.inline) {
					return ""
				}
			case in.family == "awk":
				return "" // without -f, awk's first operand is the program text
			default:
				return a
			}
		}
		return ""
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// --- the fanotify layer ---

// markExecMounts makes a fanotify group that holds every open for exec
// on each exec-capable mount of the run (as init sees them, after the
// pivot), and returns it.
func markExecMounts() (int, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_UNLIMITED_QUEUE|unix.FAN_UNLIMITED_MARKS|unix.FAN_REPORT_TID, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("exec control: fanotify (needs sandbox to run as root): %w", err)
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	defer mi.Close()
	marked := 0
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		point, opts := unescapeMount(f[4]), f[5]
		if contains(strings.Split(opts, ","), "noexec") {
			continue
		}
		if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_OPEN_EXEC_PERM, unix.AT_FDCWD, point); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // overmounted away
			}
			unix.Close(fd)
			return -1, fmt.Errorf("exec control: mark %s: %w", point, err)
		}
		marked++
	}
	if marked == 0 {
		unix.Close(fd)
		return -1, errors.New("exec control: no mount to mark")
	}
	return fd, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// serveFanotify answers the kernel's exec permission events.
func (c *execCtl) serveFanotify(fd int) {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+int(unix.FAN_EVENT_METADATA_LEN) <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Vers != unix.FANOTIFY_METADATA_VERSION || m.Event_len < uint32(unix.FAN_EVENT_METADATA_LEN) {
				return
			}
			if m.Fd >= 0 {
				allow := true
				if m.Mask&unix.FAN_OPEN_EXEC_PERM != 0 {
					allow = c.judgeKernel(int(m.Fd), int(m.Pid))
				}
				resp := unix.FanotifyResponse{Fd: m.Fd, Response: unix.FAN_ALLOW}
				if !allow {
					resp.Response = unix.FAN_DENY
				}
				unix.Write(fd, (*[unsafe.Sizeof(resp)]byte)(unsafe.Pointer(&resp))[:])
				unix.Close(int(m.Fd))
			}
			off += int(m.Event_len)
		}
	}
}

// judgeKernel decides an open for exec the kernel holds for thread tid:
// an ELF loader only as the interpreter of the program that thread's exec
// just opened (never run directly, by any name); anything else by the
// verdict already given for its content, or by asking the host. What
// cannot be hashed is refused. An admitted program's loader becomes the
// thread's one expected loader.
func (c *execCtl) judgeKernel(fd, tid int) bool {
	a, ok := c.known(fd)
	if !ok {
		if _, a = c.judge(fd, displayPath(fd, ""), RoleKernel); a == "" {
			return false
		}
	}
	c.mu.Lock()
	expected := c.pending[tid]
	delete(c.pending, tid)
	loader := c.isLoader[a]
	v, decided := c.verdicts[a]
	c.mu.Unlock()
	if loader {
		return expected == a
	}
	if !decided {
		v, _ = c.judge(fd, displayPath(fd, ""), RoleKernel)
	}
	if v {
		c.expectLoader(fd, tid)
	}
	return v
}

// expectLoader records, for thread tid, the ELF loader the program open
// at fd names, when the host admits it as that program's loader.
func (c *execCtl) expectLoader(fd, tid int) {
	l := c.headOf(fd).loader
	if l == "" {
		return
	}
	lfd, err := unix.Open(l, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(lfd)
	la, ok := c.known(lfd)
	c.mu.Lock()
	allowed, decided := c.loaders[la]
	c.mu.Unlock()
	if !ok || !decided {
		allowed, la = c.judge(lfd, l, RoleLoader)
	}
	if allowed {
		c.mu.Lock()
		c.pending[tid] = la
		c.mu.Unlock()
	}
}
