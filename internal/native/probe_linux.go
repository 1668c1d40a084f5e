//go:build linux

package native

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/tier"
)

// layer is one check of the probe.
type layer struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Probe earns the rung: it starts a confined child (this binary, in its
// probe mode) and reads back, from inside, whether each layer applies.
// S1 is available only when every layer holds. Cached per executor.
func (e *Executor) Probe(ctx context.Context) tier.Probe {
	e.probeOnce.Do(func() { e.probe = e.doProbe(ctx) })
	return e.probe
}

func (e *Executor) doProbe(ctx context.Context) tier.Probe {
	self, err := os.Executable()
	if err != nil {
		return tier.Probe{Reason: "cannot find this binary for the probe: " + err.Error()}
	}
	work, err := os.MkdirTemp("", "sandbox-s1-probe-")
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	defer os.RemoveAll(work)
	os.Chmod(work, 0o755)
	granted := filepath.Join(work, "granted")
	os.Mkdir(granted, 0o777)
	os.Chmod(granted, 0o777)
	canary := filepath.Join(work, "canary")
	os.WriteFile(canary, []byte("landlock should hide this\n"), 0o644)
	hostOnly := filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-s1-probe-host-%d", os.Getpid()))
	os.WriteFile(hostOnly, []byte("x"), 0o644)
	defer os.Remove(hostOnly)

	sp, err := e.baseSpec(nil)
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	const probeBin, probeCanary = "/.sandbox-probe", "/.sandbox-canary"
	sp.Binds = append(sp.Binds,
		bind{Host: self, Path: probeBin, File: true},
		bind{Host: canary, Path: probeCanary, File: true},
		bind{Host: granted, Path: granted, RW: true},
	)
	ex := &sp.Exec
	ex.Path = probeBin
	ex.Args = []string{"sandbox-s1-probe", ProbeArg}
	ex.Env = []string{"SANDBOX_PROBE_GRANTED=" + granted, "SANDBOX_PROBE_HOSTFILE=" + hostOnly, "SANDBOX_PROBE_CANARY=" + probeCanary,
		"SANDBOX_PROBE_HOSTPID=" + strconv.Itoa(os.Getpid())}
	ex.Dir = "/"
	ex.ROFiles = append(ex.ROFiles, probeBin)
	ex.RWPaths = append(ex.RWPaths, granted)

	var out, errb strings.Builder
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, _, err := e.launch(c, sp, nil, nil, &out, &errb, 30*time.Second, nil)
	if err != nil {
		return tier.Probe{Reason: "starting a confined child failed: " + err.Error()}
	}
	if st.Error != "" {
		return tier.Probe{Reason: "the confined child could not be set up: " + st.Error}
	}
	if !st.Exited || st.Code != 0 {
		return tier.Probe{Reason: fmt.Sprintf("the confined probe did not finish (exit %d, signal %d): %s", st.Code, st.Signal, strings.TrimSpace(errb.String()))}
	}
	var layers []layer
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		var l layer
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Name != "" {
			layers = append(layers, l)
		}
	}
	if len(layers) == 0 {
		return tier.Probe{Reason: "the confined probe reported nothing: " + strings.TrimSpace(errb.String())}
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

// runProbe is the confined child: it checks each layer from inside and
// prints one JSON line per layer.
func runProbe() int {
	enc := json.NewEncoder(os.Stdout)
	say := func(name string, ok bool, format string, args ...any) {
		enc.Encode(layer{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	// pid namespace: few processes, the host's pid invisible.
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	hostPid := os.Getenv("SANDBOX_PROBE_HOSTPID")
	_, hostVisible := os.Stat("/proc/" + hostPid + "/exe")
	say("pid-namespace", len(pids) <= 3 && errors.Is(hostVisible, os.ErrNotExist),
		"%d processes visible %v (the run's init and this probe); the host's pid %s visible: %v", len(pids), pids, hostPid, !errors.Is(hostVisible, os.ErrNotExist))
	// mount namespace and root: a host file outside grants is absent; writes
	// outside grants fail; writes inside a grant work.
	_, herr := os.Stat(os.Getenv("SANDBOX_PROBE_HOSTFILE"))
	werr := os.WriteFile("/usr/sandbox-probe", []byte("x"), 0o644)
	eerr := os.WriteFile("/etc/sandbox-probe", []byte("x"), 0o644)
	gerr := os.WriteFile(filepath.Join(os.Getenv("SANDBOX_PROBE_GRANTED"), "ok"), []byte("x"), 0o644)
	say("filesystem", errors.Is(herr, os.ErrNotExist) && werr != nil && eerr != nil && gerr == nil,
		"host file hidden: %v; write /usr: %v; write /etc: %v; write the grant: %v", errors.Is(herr, os.ErrNotExist), werr, eerr, gerr)
	// network namespace: only loopback, no route out.
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	_, derr := net.DialTimeout("tcp", "1.1.1.1:53", time.Second)
	say("network", len(ifs) <= 1 && derr != nil, "interfaces %v; connect 1.1.1.1:53: %v", names, derr)
	// credentials: unprivileged, no capabilities, no_new_privs.
	status := map[string]string{}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				status[k] = strings.TrimSpace(v)
			}
		}
	}
	zero := "0000000000000000"
	say("capabilities", status["CapEff"] == zero && status["CapPrm"] == zero && status["CapBnd"] == zero && status["CapAmb"] == zero,
		"CapEff %s CapPrm %s CapBnd %s CapAmb %s", status["CapEff"], status["CapPrm"], status["CapBnd"], status["CapAmb"])
	say("no-new-privs", status["NoNewPrivs"] == "1", "NoNewPrivs %s", status["NoNewPrivs"])
	uid := os.Getuid()
	say("user", uid != 0 || os.Getenv("SANDBOX_PROBE_USERNS") != "", "uid %d (%s)", uid, status["Uid"])
	// seccomp: a filter is on, and a mount attempt is refused.
	merr := unix.Mount("none", "/tmp", "tmpfs", 0, "")
	say("seccomp", status["Seccomp"] == "2" && merr != nil, "Seccomp %s; mount: %v", status["Seccomp"], merr)
	// Landlock: a file inside the root, readable by DAC, outside every rule.
	_, lerr := os.ReadFile(os.Getenv("SANDBOX_PROBE_CANARY"))
	say("landlock", errors.Is(lerr, os.ErrPermission), "read a file outside every rule: %v", lerr)
	return 0
}
