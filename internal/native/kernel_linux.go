package native

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/internal/audit"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
)

// FenceTimeout bounds how long a run's end waits for the kernel's audit
// queue to deliver what it holds.
var FenceTimeout = 2 * time.Second

// DenialReports says whether S1 runs on this host log the denials the
// kernel reports (Landlock's, through audit), and why not where they
// do not.
//
// The answer is kept for DenialReportsFresh (and forgotten when this
// process sets audit): the kernel answers a status request from a kernel
// thread it starts for the reply, about 0.1 ms alone and 0.7 ms on a
// busy service, which every S1 run paid on its path. A run that starts
// within that time of the operator turning audit off listens, waits out
// its fence (FenceTimeout) and is told so in finish's note; one within it
// of audit turned on reads no denials, as one a moment earlier would
// not have. A status the kernel could not give is not kept.
func DenialReports() (bool, string) {
	d := &denials
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if !d.at.IsZero() && d.sets == audit.Sets() && now.Sub(d.at) >= 0 && now.Sub(d.at) < DenialReportsFresh {
		return d.ok, d.why
	}
	sets := audit.Sets()
	ok, why, keep := askDenials()
	if keep {
		d.sets, d.ok, d.why = sets, ok, why
		d.at = time.Now()
	}
	return ok, why
}

// DenialReportsFresh is how long DenialReports keeps its answer.
const DenialReportsFresh = time.Second

// denials is DenialReports' answer, kept.
var denials struct {
	mu   sync.Mutex
	at   time.Time // when it was asked; zero: never
	sets uint64    // audit.Sets() when it was asked
	ok   bool
	why  string
}

// askDenials asks (tests count the asking).
var askDenials = askDenialReports

// askDenialReports is DenialReports, asked of the kernel, and whether
// the answer may be kept: not where the kernel could not be asked.
func askDenialReports() (ok bool, why string, keep bool) {
	if abi := s1init.ABI(); abi < 7 {
		return false, fmt.Sprintf("Landlock ABI %d reports no denials (ABI 7 does, through audit)", abi), true
	}
	if os.Geteuid() != 0 {
		return false, "reading the kernel's audit records needs root (CAP_AUDIT_READ and CAP_AUDIT_WRITE)", true
	}
	st, err := audit.GetStatus()
	if err != nil {
		return false, fmt.Sprintf("the kernel's audit status cannot be read: %v", err), false
	}
	if !st.Enabled {
		return false, "audit is disabled on this host (auditctl -e 1, or audit=1 on the kernel command line, turns it on)", true
	}
	return true, fmt.Sprintf("audit is enabled: Landlock's denials are read from its records (the kernel has lost %d records since boot)", st.Lost), true
}

// kernelWatch follows the kernel's audit records through one run.
type kernelWatch struct {
	l *audit.Listener
}

// watchKernel starts listening where S1 runs can log kernel denials;
// nil where they cannot (DenialReports says why).
func watchKernel() *kernelWatch {
	if ok, _ := DenialReports(); !ok {
		return nil
	}
	l, err := audit.Listen()
	if err != nil {
		return nil
	}
	return &kernelWatch{l: l}
}

// finish waits for the records of the run whose init was pid (and whose
// program ran as host user hostID, when not 0), logs each denial in the
// decision log, and returns notes on what it could not.
//
// A run with a host identity of its own is known by it: its Landlock
// domain is made by its launcher (s1init), a process the host does not
// see, whose user is the run's alone. Otherwise by init's pid, whose
// thread made the domain.
func (k *kernelWatch) finish(pid, hostID int, enf *grant.Enforcer) (notes []string) {
	if k == nil {
		return nil
	}
	defer k.l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), FenceTimeout)
	defer cancel()
	if err := k.l.Fence(ctx); err != nil {
		notes = append(notes, fmt.Sprintf("S1: the kernel's denials may be incomplete: %v", err))
	}
	// A domain's end (with the kernel's count) may come just after the
	// fence: its last reference goes when init is reaped.
	ended, landlock := k.l.Ended, k.l.Landlock
	key := pid
	if hostID != 0 {
		ended, landlock, key = k.l.EndedUID, k.l.LandlockOfUID, hostID
	}
	for deadline := time.Now().Add(200 * time.Millisecond); !ended(key) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	rep, overrun := landlock(key)
	listed := 0
	for _, d := range rep.Denials {
		kind, op, ok := classify(d.Blockers)
		if !ok {
			continue
		}
		rule := "landlock: " + strings.Join(d.Blockers, ",") + " (reported by the kernel)"
		for range d.Count { // merged into one entry with this count
			enf.Note(kind, op, d.Object, false, rule)
		}
		listed += d.Count
	}
	switch {
	case overrun:
		notes = append(notes, fmt.Sprintf("S1: the audit socket overflowed: the decision log lists %d of the kernel's denials, not all", listed))
	case rep.Ended && rep.Reported > uint64(listed):
		notes = append(notes, fmt.Sprintf("S1: the kernel reported %d denials; the decision log lists %d", rep.Reported, listed))
	case rep.Unlisted > 0:
		notes = append(notes, fmt.Sprintf("S1: %d more denials than the decision log lists", rep.Unlisted))
	}
	return notes
}

// classify maps Landlock's blockers (the first names the request) to the
// decision log's vocabulary.
func classify(blockers []string) (grant.Kind, string, bool) {
	if len(blockers) == 0 {
		return "", "", false
	}
	b := blockers[0]
	switch {
	case b == "fs.execute":
		return grant.KindFS, grant.OpExec, true
	case b == "fs.read_file", b == "fs.read_dir":
		return grant.KindFS, grant.OpRead, true
	case strings.HasPrefix(b, "fs."):
		return grant.KindFS, grant.OpWrite, true
	case b == "net.connect_tcp", b == "scope.abstract_unix_socket":
		return grant.KindNet, grant.OpConnect, true
	case b == "net.bind_tcp":
		return grant.KindNet, grant.OpBind, true
	case b == "scope.signal":
		return grant.KindProcess, grant.OpSignal, true
	case b == "ptrace":
		return grant.KindProcess, grant.OpTrace, true
	}
	return "", "", false
}
