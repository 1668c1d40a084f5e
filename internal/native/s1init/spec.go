package s1init

import (
	"strings"

	"github.com/opensubstrate/sandbox/internal/confine"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// Entry points: argv[1] of the helper binary.
const (
	InitArg   = "__sandbox-s1-init"
	ProbeArg  = "__sandbox-s1-probe"
	UsernsArg = "__sandbox-s1-userns" // holds a user namespace open for an idmapped mount
	LaunchArg = "__sandbox-s1-launch" // confines itself and executes a program with a host identity of its own
)

// Nobody is the user a run becomes when the host is root.
const Nobody = 65534

// Base is the part of the root that is the same for every run of an
// executor. The host sends it, as the first JSON value on fd 3, when it
// starts init; init builds it while it waits for the Spec, the second.
type Base struct {
	Root   string   `json:"root"`   // the directory to mount the root on, in init's own mount namespace
	System []string `json:"system"` // host directories bound read-only at the same path
	// Image, when set, is the host directory of an image's root
	// filesystem: System are then its top-level directories, each bound
	// read-only from Image+path, and Links its top-level symlinks; no
	// host system directory is in the run's root.
	Image    string `json:"image,omitempty"`
	Links    []Link `json:"links"`    // symlinks at /, e.g. bin -> usr/bin
	TmpSize  int64  `json:"tmp_size"` // bytes of the private /tmp
	Hostname string `json:"hostname"`
	UserNS   bool   `json:"user_ns"`
	// Launcher, when not 0, is the host id the run will have (leased by
	// the host for it): init starts the run's launcher ahead, as Nobody
	// mapped to that id, once the base is built, and the run's program
	// starts in it where the spec allows (LauncherReady).
	Launcher int `json:"launcher,omitempty"`
}

// Spec is one run: its grants and its program.
type Spec struct {
	Base  Base   `json:"base"`
	Binds []Bind `json:"binds"`
	Exec  Exec   `json:"exec"`
	// ProxyPort, when not 0, has init listen on 127.0.0.1:ProxyPort in the
	// run's network namespace and pass the listener to the host (a
	// "listener" message on the control socket, fd 5), which serves the
	// egress proxy on it.
	ProxyPort int `json:"proxy_port,omitempty"`
	// Session makes init a live sandbox's: it starts no program of its
	// own, but each one the host asks for on the session socket (fd 6;
	// SessionMsg), until the host ends it.
	Session bool `json:"session,omitempty"`
	// Guard is what no storage grant may reach (the state directory,
	// sandbox's binaries, kernel interfaces); init checks each grant's
	// object against it before it mounts that object.
	Guard hostpath.Guard `json:"guard"`
	// Devices are device nodes of the host bound into the run's /dev (a
	// granted GPU's): init checks each is the character device named
	// before the run starts.
	Devices []DevNode `json:"devices,omitempty"`
	// ProcDriver is the prefix of the /proc/driver entries the run sees
	// ("nvidia" for a GPU run); every other entry stays masked. "" keeps
	// the whole directory masked.
	ProcDriver string `json:"proc_driver,omitempty"`
	// LauncherReady says the launcher init started ahead (Base.Launcher)
	// is in the run's cgroup and cgroup namespace: the host placed init
	// in the run's group before it sent the base, or the run has none.
	// Otherwise init ends that launcher and starts the program's anew.
	LauncherReady bool `json:"launcher_ready,omitempty"`
}

// DevNode is one device node a run is given.
type DevNode struct {
	Host         string `json:"host"` // the node on the host
	Path         string `json:"path"` // where the run sees it, beneath /dev
	Major, Minor uint32
}

// Ctl is a message on the control socket between init and the host
// (fd 5 in init; a SOCK_SEQPACKET pair, one JSON value per message).
type Ctl struct {
	// Op is "listener" (init to host, with the socket as SCM_RIGHTS),
	// "exec" (init asks: may this file run?) or "verdict" (the answer).
	Op string `json:"op"`
	// Exec questions: the file's content address, its path inside the
	// run, and the role it is judged in (Roles).
	Addr string `json:"addr,omitempty"`
	Path string `json:"path,omitempty"`
	Role string `json:"role,omitempty"`
	// Verdicts. Loader says the file is an ELF loader (by its address):
	// admitted only as the interpreter of an admitted program.
	Allow  bool `json:"allow,omitempty"`
	Loader bool `json:"loader,omitempty"`
}

// KernelDir is the kernel interface (/proc, /dev or /sys) p is at or
// beneath, "" for none: a run has its own /proc and /dev and no /sys, so
// none of them is grantable.
func KernelDir(p string) string {
	for _, k := range []string{"/proc", "/dev", "/sys"} {
		if p == k || strings.HasPrefix(p, k+"/") {
			return k
		}
	}
	return ""
}

// FileKey is what says a regular file has not changed since it was
// hashed: device, inode, size, modification and change times.
type FileKey struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64
}

// The roles a file is judged in by exec control.
const (
	RoleProgram     = "program"     // execve'd
	RoleInterpreter = "interpreter" // named by a script's #! line
	RoleScript      = "script"      // the file an interpreter was invoked on
	RoleKernel      = "kernel exec" // seen on the kernel's exec path only
	RoleLoader      = "loader"      // the ELF interpreter (PT_INTERP) of an allowed program
)

// Link is a symlink at the root.
type Link struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// Bind is one storage grant (or the probe's own files).
type Bind struct {
	Host  string `json:"host"` // the host path
	Path  string `json:"path"` // where it appears inside (the same, for grants)
	RW    bool   `json:"rw"`
	Quota int64  `json:"quota"` // bytes; rw only; 0 for none
	File  bool   `json:"file"`  // a file, not a directory
	// Internal marks a bind the host makes for its own files (the probe,
	// the egress CA bundle): walked without links like a grant, but not
	// checked against the guard (it may live in the state directory).
	Internal bool `json:"internal,omitempty"`
	// IDMap is the path (under the host's /proc) of a user namespace that
	// maps the directory's owner to the guest's user, for an idmapped
	// mount; "" for a plain bind.
	IDMap string `json:"idmap,omitempty"`
	// Keep is a directory the host made (in its state directory) where
	// init keeps a quota'd grant's writes when they cannot be committed;
	// "" for none.
	Keep string `json:"keep,omitempty"`
}

// Exec is what init applies, on the thread that starts the program,
// before the program runs.
type Exec struct {
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	KeepUID bool     `json:"keep_uid"` // in a user namespace: stay the mapped user, drop capabilities
	// HostUID and HostGID, when not 0, are the host's ids for UID and
	// GID: the program runs in a user namespace of its own whose maps
	// hold that one entry each (UID → HostUID, GID → HostGID), started
	// through the launcher (LaunchArg), so that no process outside the
	// run shares its identity. The host leases them (when it is root);
	// 0 rootless, where KeepUID applies.
	HostUID int      `json:"host_uid,omitempty"`
	HostGID int      `json:"host_gid,omitempty"`
	ROPaths []string `json:"ro_paths"` // Landlock: read and execute beneath
	RWPaths []string `json:"rw_paths"` // Landlock: read, write, execute beneath
	RWFiles []string `json:"rw_files"` // Landlock: read and write these files (device nodes)
	// WriteBeneath are directories whose existing files may be written
	// and truncated (fopen "w"), nothing made or removed: a GPU run's
	// /proc, where the CUDA driver writes at initialisation.
	WriteBeneath []string `json:"write_beneath,omitempty"`
	ROFiles      []string `json:"ro_files"` // Landlock: read and execute these files
	NoFile       uint64   `json:"nofile"`
	// ConnectPorts are the TCP ports Landlock lets the program connect
	// to (the egress proxy's); every other connect and every bind is
	// refused.
	ConnectPorts []int `json:"connect_ports,omitempty"`
	// ListenPorts are TCP ports Landlock lets the program bind (and
	// connect to): a live sandbox's own services, reachable only inside
	// its network namespace, which has loopback alone.
	ListenPorts []int `json:"listen_ports,omitempty"`
	// ExecControl has every exec judged by content address: each execve
	// and execveat is held (seccomp user notification) while init hashes
	// the file, its #! interpreter and, for an interpreter, the file it
	// is invoked on, and asks the host ("exec" on the control socket); a
	// refusal fails the call with EACCES. Every open for exec on the run's
	// mounts is judged again on the kernel's exec path (fanotify), which
	// refuses with EPERM whatever the first check missed.
	ExecControl bool `json:"exec_control,omitempty"`
	// KernelExecOnly leaves out the seccomp layer, so that a test can
	// show what the fanotify layer alone refuses.
	KernelExecOnly bool `json:"kernel_exec_only,omitempty"`
	// Seccomp is the filter program, assembled by the host.
	Seccomp confine.Program `json:"seccomp"`
	// Probe marks the tier probe, whose denials are its purpose: the
	// kernel is not asked to report them (Landlock ABI 7 audit).
	Probe bool `json:"probe,omitempty"`
}

// Status is what init reports to the host, as JSON on fd 4.
type Status struct {
	Started bool   `json:"started"`
	Exited  bool   `json:"exited"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal"`
	Error   string `json:"error,omitempty"`
	// ExecErrno is the error number of a program that could not be
	// executed at all (ENOENT, EACCES, ENOEXEC, ...), with Error.
	ExecErrno int `json:"exec_errno,omitempty"`
	// Commits says, for each quota'd grant, what of the run's writes was
	// committed to it.
	Commits []Commit `json:"commits,omitempty"`
}

// Commit is what became of one quota'd grant's writes.
type Commit struct {
	Path    string `json:"path"`    // the grant
	Entries int    `json:"entries"` // applied to the grant (files, directories, links, deletions)
	Bytes   int64  `json:"bytes"`   // of file data written to the grant
	Error   string `json:"error,omitempty"`
	// Kept is where every write of the run to this grant was kept,
	// whole, when the commit failed; "" when it did not, or when keeping
	// failed too (Error says so).
	Kept string `json:"kept,omitempty"`
}

// SessionMsg is a message on a live sandbox's session socket (fd 6 in
// init; a SOCK_SEQPACKET pair, one JSON value per message).
//
// Host to init: "exec" (with stdin, stdout and stderr, then the exec's
// cgroup tasks files, as SCM_RIGHTS) starts a program confined as the
// spec's Exec with Path, Args, Env and Dir replaced; "kill" sends Signal
// to exec ID's process group. Init to host: "started" (Pid, in the
// run's pid namespace), "failed" (Error, Errno: it could not start),
// "exited" (Exited and Code, or Signal).
type SessionMsg struct {
	Op     string   `json:"op"`
	ID     uint64   `json:"id"`
	Path   string   `json:"path,omitempty"`
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"`
	Dir    string   `json:"dir,omitempty"`
	Signal int      `json:"signal,omitempty"`
	Pid    int      `json:"pid,omitempty"`
	Exited bool     `json:"exited,omitempty"`
	Code   int      `json:"code,omitempty"`
	Error  string   `json:"error,omitempty"`
	Errno  int      `json:"errno,omitempty"`
}

// SessionFD is the session socket's descriptor in init.
const SessionFD = 6
