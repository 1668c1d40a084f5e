package native

// Helper entry points: argv[1] of the re-executed binary.
const (
	InitArg   = "__sandbox-s1-init"
	ExecArg   = "__sandbox-s1-exec"
	ProbeArg  = "__sandbox-s1-probe"
	UsernsArg = "__sandbox-s1-userns" // holds a user namespace open for an idmapped mount
)

// spec is what the host tells the init helper, as JSON on fd 3.
type spec struct {
	Root     string   `json:"root"`    // empty directory to build the root in
	Scratch  string   `json:"scratch"` // empty directory for overlay layers
	System   []string `json:"system"`  // host directories bound read-only at the same path
	Links    []link   `json:"links"`   // symlinks at /, e.g. bin -> usr/bin
	Binds    []bind   `json:"binds"`
	TmpSize  int64    `json:"tmp_size"` // bytes of the private /tmp
	Hostname string   `json:"hostname"`
	Exec     execSpec `json:"exec"`
	UserNS   bool     `json:"user_ns"`
}

type link struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// bind is one storage grant (or the probe's own binary).
type bind struct {
	Host  string `json:"host"` // the host path
	Path  string `json:"path"` // where it appears inside (the same, for grants)
	RW    bool   `json:"rw"`
	Quota int64  `json:"quota"` // bytes; rw only; 0 for none
	File  bool   `json:"file"`  // a file, not a directory
	// IDMap is the descriptor, in init, of a user namespace mapping the
	// directory's owner to the guest's user, for an idmapped mount; 0 for
	// a plain bind.
	IDMap int `json:"idmap,omitempty"`
}

// execSpec is what the exec helper applies before it execs the program.
type execSpec struct {
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	KeepUID bool     `json:"keep_uid"` // in a user namespace: stay the mapped user, drop capabilities
	ROPaths []string `json:"ro_paths"` // Landlock: read and execute beneath
	RWPaths []string `json:"rw_paths"` // Landlock: read, write, execute beneath
	RWFiles []string `json:"rw_files"` // Landlock: read and write these files (device nodes)
	ROFiles []string `json:"ro_files"` // Landlock: read and execute these files
	NoFile  uint64   `json:"nofile"`
	// ProbeCanary is a file that is inside the root but outside every
	// Landlock rule, for the probe to prove Landlock is on.
	ProbeCanary string `json:"probe_canary,omitempty"`
}

// status is what the init helper reports to the host, as JSON on fd 4.
type status struct {
	Started bool   `json:"started"`
	Exited  bool   `json:"exited"`
	Code    int    `json:"code"`
	Signal  int    `json:"signal"`
	Error   string `json:"error,omitempty"`
	Commit  string `json:"commit,omitempty"` // problems committing quota overlays
}
