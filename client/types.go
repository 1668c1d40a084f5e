package client

import (
	"encoding/json"
	"io"
	"time"
)

// SandboxSpec is what a live sandbox is created with.
type SandboxSpec struct {
	// Tier is "S1" (native programs; the default), "S2" (WebAssembly
	// modules) or "S5" (native programs in a microVM of its own).
	Tier string `json:"tier,omitempty"`
	// Grants in the command line's syntax ("fs:/data:ro", "cpu:5J"); a
	// workspace is granted read-write besides.
	Grants []string `json:"grants,omitempty"`
	// Env is added to every exec's environment.
	Env map[string]string `json:"env,omitempty"`
	// Limits of the sandbox (S1: its cgroup's, shared by all it runs).
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	// Listen are TCP ports an S1 sandbox's processes may listen on,
	// inside its own network namespace (loopback only).
	Listen []int `json:"listen,omitempty"`
	// Image is an imported image (name, ID or unique prefix) whose root
	// filesystem an S1 sandbox's programs run in.
	Image string `json:"image,omitempty"`
	// Manifest is a signed environment manifest ('sandbox manifest -o'),
	// signed by the service's host key: the sandbox is made from it (its
	// image where Image is not given, its environment, its forwarded
	// ports) and binds its address.
	Manifest json.RawMessage `json:"manifest,omitempty"`
}

// Pool is a warm pool as the service describes it (sandbox serve --pool).
type Pool struct {
	Name      string `json:"name"`
	Size      int    `json:"size"`
	Ready     int    `json:"ready"`
	Draining  bool   `json:"draining"`
	Made      uint64 `json:"made"`
	Claims    uint64 `json:"claims"`
	Misses    uint64 `json:"misses"`
	Evictions uint64 `json:"evictions"`
	Failures  uint64 `json:"failures"`
	ClaimedUJ uint64 `json:"claimed_uj"`
	EvictedUJ uint64 `json:"evicted_uj"`
}

// Sandbox is a live sandbox as the service describes it.
type Sandbox struct {
	ID   string `json:"id"`
	Tier string `json:"tier"`
	// State is "live" or "suspended" (its workspace kept by address,
	// nothing of it running: Resume starts it again); in a cluster's
	// list also "lost" (its host died while it was live, and the cluster
	// keeps no suspension of it to resume).
	State     string            `json:"state"`
	Workspace string            `json:"workspace,omitempty"`
	Created   time.Time         `json:"created"`
	Execs     int               `json:"execs"`
	Running   int               `json:"running"`
	Grants    []string          `json:"grants"`
	Env       map[string]string `json:"env,omitempty"`
	Listen    []int             `json:"listen,omitempty"`
	// Root is the image root filesystem it runs in (b3:…), Manifest
	// the environment manifest it was made from (b3:…).
	Root     string `json:"root,omitempty"`
	Manifest string `json:"manifest,omitempty"`
	// Incarnation names this life of its processes: a new one at each
	// creation and resumption (a seed's receipt asks for one).
	Incarnation string `json:"incarnation,omitempty"`
	// Continued are the execs a resumption continued: S2 execs the
	// suspension parked, each sealed now as the whole run it is.
	Continued []Continued `json:"continued,omitempty"`
	// Host, in a cluster's list, is the id of the host that holds it
	// (or last did) where that is not the host asked; what the cluster
	// keeps of such a sandbox is its id, tier, state and creation.
	Host string `json:"host,omitempty"`
}

// Continued is a parked exec a resumption continued. Stdout and Stderr
// are what it wrote after its park point (its caller before the
// suspension had the rest; its run's records hold all of it).
type Continued struct {
	N      int     `json:"n"`
	Result *Result `json:"result,omitempty"`
	Stdout []byte  `json:"stdout,omitempty"`
	Stderr []byte  `json:"stderr,omitempty"`
	Error  string  `json:"error,omitempty"`
}

// ExecSpec is one command in a live sandbox, or a one-shot run.
type ExecSpec struct {
	Args []string          `json:"args"`
	Env  map[string]string `json:"env,omitempty"`
	// Dir is the working directory (default: the workspace; a one-shot
	// run's: "/", where its relative paths resolve too): an absolute,
	// clean path, else the service refuses the call (400).
	Dir string `json:"dir,omitempty"`
	// DeadlineMS is the wall-clock limit; 0: the service's default (one
	// minute); negative: none.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// Stdin is given to the program whole (at most 16 MiB).
	Stdin []byte `json:"stdin,omitempty"`
	// StdinStream, when set (and Stdin is not), is streamed to the
	// program as it reads, while its output streams back.
	StdinStream io.Reader `json:"-"`
	// InterruptKey names the call, so that cancelling its context
	// interrupts it and still returns its sealed result (the client
	// picks one when it is empty).
	InterruptKey string `json:"interrupt_key,omitempty"`

	// One-shot runs only: grants (in the command line's syntax, and a
	// set in grants.json's form), a tier, escalation, limits.
	Grants     []string        `json:"grants,omitempty"`
	GrantsJSON json.RawMessage `json:"grants_json,omitempty"`
	Tier       string          `json:"tier,omitempty"`
	Escalate   bool            `json:"escalate,omitempty"`
	// Image is an imported image (a name, an ID or a unique prefix of
	// one) whose root filesystem a native run has in place of the
	// host's system directories (runs only; a sandbox's execs run in its
	// own).
	Image  string  `json:"image,omitempty"`
	Limits *Limits `json:"limits,omitempty"`
	// JCP presents the run (or exec) with a JCP chain: the gate decides
	// it before anything runs and reserves its budget (docs/spec/jcp.md).
	JCP *JCP `json:"jcp,omitempty"`
}

// JCP is a JCP chain and the invocation its last grant's audience signed,
// each a COSE_Sign1 envelope (base64 in JSON).
type JCP struct {
	Chain      [][]byte `json:"chain"`
	Invocation []byte   `json:"invocation"`
}

// Limits are a one-shot run's own limits; zero fields take the
// service's.
type Limits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"` // S1: its cgroup's memory
	Pids        int64 `json:"pids,omitempty"`         // S1: its processes and threads
	CPUMillis   int64 `json:"cpu_millis,omitempty"`   // S1: thousandths of a CPU
	MemoryPages int64 `json:"memory_pages,omitempty"` // S2: 64 KiB pages of guest memory
}

// StdinStreamType is the content type of a call whose stdin streams:
// the ExecSpec as one line of JSON, then the stdin's bytes to the end
// of the body.
const StdinStreamType = "application/x-sandbox-exec-stream"

// Result is a run as `sandbox run --json` describes it (docs/cli.md,
// schema 1: fields are only ever added): an exec, or a one-shot run.
type Result struct {
	Schema int    `json:"schema"`
	Run    string `json:"run,omitempty"`   // the attestation's address, b3:…
	Sealed bool   `json:"sealed"`          // records stored, signed, verifiable
	Error  string `json:"error,omitempty"` // why it was refused, failed, or not sealed
	Tier   string `json:"tier,omitempty"`  // chosen
	// TierRequired and TierReason are what the grants required, and why.
	TierRequired string   `json:"tier_required,omitempty"`
	TierReason   string   `json:"tier_reason,omitempty"`
	Outcome      *Outcome `json:"outcome,omitempty"`
	// ExitStatus is what `sandbox run` exits with for it; ExitFrom says
	// whose it is: "guest" (its exit status, or 128+N for its death by
	// signal N) or "sandbox" (a limit, a refusal, a failure, an interrupt).
	ExitStatus int      `json:"exit_status"`
	ExitFrom   string   `json:"exit_status_from"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	Fuel       *uint64  `json:"fuel,omitempty"`
	Energy     []Energy `json:"energy,omitempty"`
	Records    string   `json:"records,omitempty"` // the run directory, on the service's host
	Notes      []string `json:"notes,omitempty"`   // remarks on the run
}

// Outcome is how a run ended.
type Outcome struct {
	Status   string `json:"status"` // exited, deadline, out-of-fuel, budget-exhausted, out-of-memory, trapped, killed, failed
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"` // S1: the signal that ended the guest
	Detail   string `json:"detail,omitempty"`
}

// Energy is one device class's energy in a run's receipt, in µJ.
type Energy struct {
	Class       string   `json:"class"`
	MeasuredUJ  uint64   `json:"measured_uj"`
	EstimatedUJ uint64   `json:"estimated_uj"`
	Provenance  []string `json:"provenance"` // each reading's "Provenance source"
}

// FileInfo is one entry of a directory listing.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	Dir     bool      `json:"dir,omitempty"`
	Link    bool      `json:"link,omitempty"`
	ModTime time.Time `json:"mod_time"`
}

// Frame is one line of a streamed exec: output as it comes, then the
// result or an error.
type Frame struct {
	Stdout []byte    `json:"stdout,omitempty"`
	Stderr []byte    `json:"stderr,omitempty"`
	Result *Result   `json:"result,omitempty"`
	Error  *APIError `json:"error,omitempty"`
}

// APIError is an error the service answered with.
type APIError struct {
	Status   int    `json:"-"`
	Category string `json:"category"` // internal, invalid, not-found, denied, unavailable, limit, …
	Message  string `json:"message"`
	// ExitStatus, for a program that cannot be run, is what `sandbox
	// run` exits with for it: 127 not found, 126 not executable.
	ExitStatus int `json:"exit_status,omitempty"`
	// Code, for a refusal of bytes (a JCP chain or token, a record), is
	// its refusal code (docs/conformance.md, docs/spec/jcp.md §9):
	// "widen-ceiling", "amend-not-issuer", "over-ceiling", …
	Code string `json:"code,omitempty"`
}

func (e *APIError) Error() string { return e.Message }

// ForkSpec is what a fork makes: Count sandboxes (1 to MaxFork) from
// one sandbox's state; Suspended leaves them suspended, each started
// when it is resumed.
type ForkSpec struct {
	Count     int  `json:"count"`
	Suspended bool `json:"suspended,omitempty"`
}

// MaxFork is the most sandboxes one fork makes.
const MaxFork = 64

// Forked is what a fork made: the parent's record (its head₀, Genesis,
// and the head its state was taken at, as each child's record cites
// them), the snapshot every child began from, and each child, in order:
// its sandbox, or the error that stopped it (partial success).
type Forked struct {
	Parent   string      `json:"parent"`
	Genesis  string      `json:"genesis"`
	Head     string      `json:"head"`
	Snapshot Snapshot    `json:"snapshot"`
	Children []ForkChild `json:"children"`
}

// ForkChild is one child of a fork: ID always; Sandbox where it was
// made, Error where not (its record, if begun, closed saying why).
type ForkChild struct {
	ID      string    `json:"id"`
	Sandbox *Sandbox  `json:"sandbox,omitempty"`
	Error   *APIError `json:"error,omitempty"`
}

// Snapshot is what a suspension retained, by content address.
type Snapshot struct {
	Root     string `json:"root"`             // the workspace's tree
	Memory   string `json:"memory,omitempty"` // a memory image, where one is kept
	Manifest string `json:"manifest"`         // the environment it ran in
}

// Record is a sandbox's run record (docs/spec/run-record.md): the
// durable run it is, live, parked or closed.
type Record struct {
	ID       string `json:"id"`
	Phase    string `json:"phase"` // active, parked, closed
	Head     string `json:"head"`
	Segments int    `json:"segments"`
	Executed int    `json:"executed"`
	IdleUJ   uint64 `json:"idle_uj"` // the idle energy of its parked intervals
	// ActiveUJ is its executions' energy (their receipts, every class);
	// TotalUJ adds the idle energy: what the durable run cost.
	ActiveUJ    uint64 `json:"active_uj"`
	TotalUJ     uint64 `json:"total_uj"`
	RunsMissing int    `json:"runs_missing,omitempty"` // executions whose receipts are not on the host
	Error       string `json:"error,omitempty"`
}

// FleetSpec is a fleet to run in the service: one command, each input
// appended to its arguments as an item of its own, each item a sealed
// one-shot run, Workers at once.
type FleetSpec struct {
	Args       []string          `json:"args"`
	Env        map[string]string `json:"env,omitempty"`
	Dir        string            `json:"dir,omitempty"`
	Grants     []string          `json:"grants,omitempty"`
	GrantsJSON json.RawMessage   `json:"grants_json,omitempty"`
	Inputs     []string          `json:"inputs,omitempty"`
	// Units, in place of Args and Inputs: N units, each item a command
	// line of its own (its input, as the leaf names it, is the command
	// line's canonical JSON).
	Units   [][]string `json:"units,omitempty"`
	Workers int        `json:"workers,omitempty"`
	// CheckpointEvery: intermediate checkpoints each time the done
	// prefix grows by this many items (0: a tenth; negative: none).
	CheckpointEvery int `json:"checkpoint_every,omitempty"`
}

// FleetFrame is one line of a fleet's answer: progress, then the fleet
// or an error.
type FleetFrame struct {
	Progress *FleetProgress `json:"progress,omitempty"`
	Fleet    *FleetResult   `json:"fleet,omitempty"`
	Error    *APIError      `json:"error,omitempty"`
}

// FleetProgress is how many items of the fleet have ended.
type FleetProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}

// FleetResult is a fleet that ran: its id and directory in the service's
// state, its item count, the items whose guest did not exit 0 (still
// sealed) and its signed checkpoint.
type FleetResult struct {
	ID         string `json:"id"`
	Dir        string `json:"dir"`
	Items      int    `json:"items"`
	Failed     int    `json:"failed"`
	Checkpoint string `json:"checkpoint"`
}

// Claim is a seed's owner claim: from the caller's trusted context (the
// run, requester, thread and repository it acts for, the branch and the
// commit it resolved), never from anything the sandbox ran.
type Claim struct {
	Run        string `json:"run"`
	Requester  string `json:"requester"`
	Thread     string `json:"thread"`
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	Head       string `json:"head"`
}

// SeedSpec seeds a live S1 sandbox's workspace with a git checkout.
type SeedSpec struct {
	// Source is an absolute path the sandbox may read, or an https URL
	// it may reach, with no credential in it.
	Source string `json:"source"`
	Ref    string `json:"ref"`
	// Claim binds the seed to an owner (its ref is Ref, its head the
	// commit the checkout must be at); without one the seed is
	// unclaimed and its receipt unknown.
	Claim *Claim `json:"claim,omitempty"`
	// Origin is the credential-free https remote bound at the seed's
	// birth (default: Source, when it is an https URL).
	Origin string `json:"origin,omitempty"`
	// Bearer authorizes an https fetch; it is used once and never kept.
	Bearer string `json:"bearer,omitempty"`
	// Incarnation, on a retry, is the one the first seed answered.
	Incarnation string `json:"incarnation,omitempty"`
}

// Seeded is what a seed bound.
type Seeded struct {
	Sandbox     string   `json:"sandbox"`
	Incarnation string   `json:"incarnation"`
	State       string   `json:"state"` // "bound", or "pending" for an unclaimed seed
	Head        string   `json:"head"`
	Cached      bool     `json:"cached,omitempty"`
	Runs        []string `json:"runs,omitempty"`
}

// ReceiptSpec asks for a passive preservation receipt: the exact owner
// claim, the seed's source and an incarnation.
type ReceiptSpec struct {
	Claim       Claim  `json:"claim"`
	Source      string `json:"source"`
	Incarnation string `json:"incarnation"`
}

// PreservationReceipt is what is stored of a seeded sandbox for one
// owner and incarnation: "present", "lost" or "unknown". It is read
// from durable metadata only and is never a permit to retire it.
type PreservationReceipt struct {
	Sandbox     string     `json:"sandbox"`
	State       string     `json:"state"`
	Reason      string     `json:"reason"`
	Checkpoint  string     `json:"checkpoint,omitempty"`
	Incarnation string     `json:"incarnation"`
	Taken       *time.Time `json:"taken,omitempty"`
	RetainUntil *time.Time `json:"retain_until,omitempty"`
}

// RunReport is a sealed run, verified by the service against its own
// key: whether every record checks out, how it ended and its receipt.
type RunReport struct {
	Run      string   `json:"run"`
	Verified bool     `json:"verified"`
	Problems []string `json:"problems,omitempty"`
	Signer   string   `json:"signer,omitempty"`
	Unit     string   `json:"unit,omitempty"`
	Outcome  *Outcome `json:"outcome,omitempty"`
	Started  string   `json:"started,omitempty"`
	Ended    string   `json:"ended,omitempty"`
	Energy   []Energy `json:"energy,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// HostKey is the key a service's host seals its runs and records with.
type HostKey struct {
	Key string `json:"key"` // ed25519:HEX
}

// WatchEvent is one line of a watch's stream (GET
// /v1/sandboxes/{id}/watch): Op is "watching" first (the watch is in
// place: every change from then on is reported), then create, modify,
// delete, rename (From the old path), overflow (Why: events were lost)
// and, last, ended (Why: the sandbox was suspended, closed or removed, or
// the directory went). Paths are the sandbox's.
type WatchEvent struct {
	Op   string `json:"op"`
	Path string `json:"path,omitempty"`
	From string `json:"from,omitempty"`
	Dir  bool   `json:"dir,omitempty"`
	Why  string `json:"why,omitempty"`
}

// PreviewSpec asks for a preview of one of a live sandbox's listen ports
// (POST /v1/sandboxes/{id}/ports): TTLSeconds how long it lasts (0: an
// hour; at most a day).
type PreviewSpec struct {
	Port       int   `json:"port"`
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// Preview is an open preview of a sandbox's port: its ID (the content
// address of its token, as the sandbox's record keeps it) and when it
// expires. Token and URL are said once, when it is made: whoever has the
// URL reaches the port until Expires or a revocation.
type Preview struct {
	Sandbox string    `json:"sandbox"`
	Port    int       `json:"port"`
	ID      string    `json:"preview"`
	Expires time.Time `json:"expires"`
	Token   string    `json:"token,omitempty"`
	URL     string    `json:"url,omitempty"`
}

// Previews are a sandbox's open previews (GET /v1/sandboxes/{id}/ports).
type Previews struct {
	Previews []Preview `json:"previews"`
}

// Revoked says how many previews a revocation ended.
type Revoked struct {
	Revoked int `json:"revoked"`
}
