package executor

import (
	"context"
	"net"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
)

// SessionSpec is what a live session is opened with: what it may reach
// and under which limits, for its whole life.
type SessionSpec struct {
	// Grants are the session's (its workspace among them). Each exec's
	// job carries the same grants and an Enforcer of its own, into
	// which the session replays the decisions made while the exec ran.
	Grants grant.Set
	// Limits bound the whole session (memory, processes, CPUs); an
	// exec's deadline is its own job's.
	Limits unit.Limits
	// Cgroup is the session's own control group, made by the engine;
	// nil where the host has none (the limits are then recorded, not
	// enforced, and a note says so).
	Cgroup *cgroup.Group
	// Listen are TCP ports its processes may listen on, inside the
	// session only; an executor that cannot give them refuses a spec
	// that names any.
	Listen []int
	// RootDir is the host directory of the image root filesystem its
	// programs run in; "" for the host's system directories. An
	// executor that is not a RootProber refuses one.
	RootDir string
}

// Sessioner is an Executor that opens live sessions: one confined
// environment, made once with its grants, that runs each exec of a live
// sandbox, so that processes and files outlast the exec that made them.
type Sessioner interface {
	Executor
	// OpenSession starts a session. Its processes run until Close,
	// whatever its execs do; a failed open leaves nothing running.
	OpenSession(ctx context.Context, spec SessionSpec) (Session, error)
}

// Session is a live sandbox's processes, opened by a Sessioner.
type Session interface {
	// Run runs one exec as a job (the Executor contract: its Outcome,
	// its streams, its Enforcer's decisions, its Cgroup for its CPU
	// time). Its deadline, a budget stop or a cancelled ctx end the
	// exec's processes, never the session; what the exec started in the
	// background runs on. Run on a session that has ended is an error.
	Run(ctx context.Context, j *Job) (*Result, error)
	// Alive says whether the session still runs (its init, its VM). It
	// only looks.
	Alive() bool
	// Notes are the session's remarks for the caller (its first exec's
	// record carries them).
	Notes() []string
	// Close ends every process of the session and releases what it
	// holds (its quota'd writes committed where it has any); Alive is
	// false after it. A second Close returns the first's error.
	Close() error
}

// Freezer is a Session that can be stilled: Freeze stops every process
// of it (its init's, its VM's vCPUs) until Thaw, so that nothing of it
// runs to change its workspace. Frozen reads back from outside the guest
// (the freezer cgroup, the VM monitor) whether it is, with that
// witness's word for its state: the quiescence a durable suspension
// needs is never the guest's word.
type Freezer interface {
	Freeze(ctx context.Context) error
	Thaw(ctx context.Context) error
	Frozen(ctx context.Context) (bool, string, error)
}

// PortDialer is a Session whose listening ports the host can reach (a
// port preview): DialPort connects to one of the session's Listen ports
// as a process inside it would, and refuses any other port.
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Snapshotter is a Session whose whole state (processes and memory) can
// be written to an image, and continued from it by a Resumer.
type Snapshotter interface {
	Freezer
	// Suspend has the guest let go of what it shares with the host
	// (refused, with the reason, while a process holds a file there),
	// stills it, and writes its image to path (a new file). The session
	// stays frozen: Close it, or Continue it. On failure it runs on as
	// it was.
	Suspend(ctx context.Context, path string) (*Snapshot, error)
	// Continue lets a session Suspend stilled run on, with what it
	// shares again.
	Continue(ctx context.Context) error
}

// Resumer is a Sessioner that reopens a session from an image a
// Snapshotter wrote, with the grants it has now (the same storage
// grants in the same order; the workspace perhaps at another path).
type Resumer interface {
	Sessioner
	// ResumeSession reopens the session from the image at path (a file
	// whose address the caller checked).
	ResumeSession(ctx context.Context, spec SessionSpec, path string) (Session, error)
}

// Snapshot is a session's image on disk, named by its content.
type Snapshot struct {
	Path string
	Addr addr.Addr
	Size int64
}
