//go:build linux

package native

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/native/s1init"
	"github.com/opensubstrate/sandbox/tier"
)

// On Linux, S1 runs in an image's root filesystem and its probe is kept.
var (
	_ executor.RootProber = (*Executor)(nil)
	_ executor.ProbeKeyer = (*Executor)(nil)
)

// Probe earns the rung: it starts a confined child (this binary, in its
// probe mode) and reads back, from inside, whether each layer applies.
// S1 is available only when every layer holds. Kept once available.
func (e *Executor) Probe(ctx context.Context) tier.Probe {
	return e.probe.Get(func() tier.Probe { return e.doProbe(ctx, "") })
}

// ProbeRoot is the same probe in the image root filesystem at root: the
// same layers, checked from inside a child whose root is built from it.
// Kept per root once available (a root's content is fixed by its address).
func (e *Executor) ProbeRoot(ctx context.Context, root string) tier.Probe {
	k, _ := e.rootProbes.LoadOrStore(root, new(tier.Kept))
	return k.(*tier.Kept).Get(func() tier.Probe { return e.doProbe(ctx, root) })
}

func (e *Executor) doProbe(ctx context.Context, root string) tier.Probe {
	self, err := filepath.EvalSymlinks(e.self())
	if err != nil {
		return tier.Probe{Reason: "cannot find the S1 helper for the probe: " + err.Error()}
	}
	work, err := e.mkTemp(os.TempDir(), "sandbox-s1-probe")
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	if real, err := filepath.EvalSymlinks(work); err == nil {
		work = real // binds are walked without following links
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	granted := filepath.Join(work, "granted")
	os.Mkdir(granted, 0o777)
	os.Chmod(granted, 0o777)
	canary := filepath.Join(work, "canary")
	os.WriteFile(canary, []byte("landlock should hide this\n"), 0o644)
	// A host file beside the work directory (not inside it, which the run
	// sees), under a name the collector knows.
	hostOnly := work + "-host"
	os.WriteFile(hostOnly, []byte("x"), 0o644)
	defer os.Remove(hostOnly)

	sp, err := e.spec(nil, root)
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	const probeBin, probeCanary = "/.sandbox-probe", "/.sandbox-canary"
	sp.Binds = append(sp.Binds,
		s1init.Bind{Host: self, Path: probeBin, File: true, Internal: true},
		s1init.Bind{Host: canary, Path: probeCanary, File: true, Internal: true},
		s1init.Bind{Host: granted, Path: granted, RW: true, Internal: true},
	)
	ex := &sp.Exec
	ex.Path = probeBin
	ex.Args = []string{"sandbox-s1-probe", s1init.ProbeArg}
	ex.Env = []string{"SANDBOX_PROBE_GRANTED=" + granted, "SANDBOX_PROBE_HOSTFILE=" + hostOnly, "SANDBOX_PROBE_CANARY=" + probeCanary,
		"SANDBOX_PROBE_HOSTPID=" + strconv.Itoa(os.Getpid())}
	ex.Dir = "/"
	ex.Probe = true
	ex.ROFiles = append(ex.ROFiles, probeBin)
	ex.RWPaths = append(ex.RWPaths, granted)

	// Where the program has a host identity of its own (root), the host
	// checks it from outside while the probe waits: the probe says
	// "ready" and waits for its stdin to end.
	ownID := !sp.Base.UserNS
	if ownID {
		ex.Env = append(ex.Env, "SANDBOX_PROBE_WAIT=1")
	}
	var errb strings.Builder
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	started := make(chan [2]int, 1)
	var hostLayer *tier.Layer
	out := &probeOut{ready: func() {
		defer stdinW.Close()
		if ids := <-started; ids[1] != 0 {
			ok, detail := hostIdentity("/proc", ids[0], ids[1])
			hostLayer = &tier.Layer{Name: "host-identity", OK: ok, Detail: detail}
		}
	}}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, _, err := e.launch(c, sp, launchOpts{stdin: stdinR, stdout: out, stderr: &errb, deadline: 30 * time.Second,
		started: func(initPid, hostID int) { started <- [2]int{initPid, hostID} }})
	if err != nil {
		return tier.Probe{Reason: "starting a confined child failed: " + err.Error()}
	}
	if st.Error != "" {
		return tier.Probe{Reason: "the confined child could not be set up: " + st.Error}
	}
	if !st.Exited || st.Code != 0 {
		return tier.Probe{Reason: fmt.Sprintf("the confined probe did not finish (exit %d, signal %d): %s", st.Code, st.Signal, strings.TrimSpace(errb.String()))}
	}
	var layers []s1init.Layer
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var l s1init.Layer
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Name != "" {
			layers = append(layers, l)
		}
	}
	if len(layers) == 0 {
		return tier.Probe{Reason: "the confined probe reported nothing: " + strings.TrimSpace(errb.String())}
	}
	if ownID {
		l := s1init.Layer{Name: "host-identity", Detail: "the probe never said it was ready for the host to look at it"}
		if hostLayer != nil {
			l = s1init.Layer{Name: hostLayer.Name, OK: hostLayer.OK, Detail: hostLayer.Detail}
		}
		layers = append(layers, l)
	}
	p := tier.Probe{Available: true}
	var parts []string
	for _, l := range layers {
		p.Layers = append(p.Layers, tier.Layer{Name: l.Name, OK: l.OK, Detail: l.Detail})
		if !l.OK {
			p.Available = false
			parts = append(parts, l.Name+": "+l.Detail)
		}
	}
	if p.Available {
		p.Reason = fmt.Sprintf("all %d layers verified from inside a confined child", len(layers))
	} else {
		p.Reason = "layers missing: " + strings.Join(parts, "; ")
	}
	return p
}

// probeOut keeps what the probe prints and calls ready, once, on its
// line "ready".
type probeOut struct {
	mu    sync.Mutex
	b     strings.Builder
	line  []byte
	once  sync.Once
	ready func()
}

func (o *probeOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.b.Write(p)
	var seen bool
	for _, c := range p {
		if c != '\n' {
			o.line = append(o.line, c)
			continue
		}
		seen = seen || string(o.line) == "ready"
		o.line = o.line[:0]
	}
	o.mu.Unlock()
	if seen {
		o.once.Do(o.ready)
	}
	return len(p), nil
}

func (o *probeOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// ProbeKey is what the probe's result depends on besides the kernel and
// the boot: the helper it starts (by file identity: device, inode, size,
// modification and change times, which stand for its content as they do
// for exec control's hashes) and the configuration every run's root and
// limits are built from.
func (e *Executor) ProbeKey() (string, error) {
	self, err := filepath.EvalSymlinks(e.self())
	if err != nil {
		return "", err
	}
	k, err := fileKeyOf(self)
	if err != nil {
		return "", err
	}
	b, err := e.base("")
	if err != nil {
		return "", err
	}
	j, _ := json.Marshal(struct {
		Helper s1init.FileKey
		Path   string
		Base   s1init.Base
		NoFile uint64
		EUID   int
	}{k, self, b, e.cfg.NoFile, os.Geteuid()})
	return string(j), nil
}

func fileKeyOf(p string) (s1init.FileKey, error) {
	f, err := os.Open(p)
	if err != nil {
		return s1init.FileKey{}, err
	}
	defer f.Close()
	return s1init.Identity(int(f.Fd()))
}
