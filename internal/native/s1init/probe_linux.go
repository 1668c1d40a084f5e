//go:build linux

package s1init

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Layer is one check of the probe, as the probe prints it.
type Layer struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// runProbe is the confined child: it checks each layer from inside and
// prints one JSON line per layer.
func runProbe() int {
	enc := json.NewEncoder(os.Stdout)
	say := func(name string, ok bool, format string, args ...any) {
		enc.Encode(Layer{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
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
	names := interfaces()
	derr := connect([4]byte{1, 1, 1, 1}, 53)
	say("network", len(names) <= 1 && derr != nil, "interfaces %v; connect 1.1.1.1:53: %v", names, derr)
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
	hostUID := hostID(uid)
	say("user", hostUID != 0, "uid %d inside, host uid %d: never the host's root", uid, hostUID)
	// seccomp: a filter is on, and a mount attempt is refused.
	merr := unix.Mount("none", "/tmp", "tmpfs", 0, "")
	say("seccomp", status["Seccomp"] == "2" && merr != nil, "Seccomp %s; mount: %v", status["Seccomp"], merr)
	// init: out of the guest's reach, not signalled, not listed, not read.
	kerr := unix.Kill(1, 0)
	_, lerr1 := os.Stat("/proc/1")
	_, rerr := os.ReadFile("/proc/1/environ")
	say("init", kerr != nil && errors.Is(lerr1, os.ErrNotExist) && rerr != nil,
		"signal pid 1: %v; /proc/1 listed: %v; read its environment: %v", kerr, !errors.Is(lerr1, os.ErrNotExist), rerr)
	// Landlock: a file inside the root, readable by DAC, outside every rule.
	_, lerr := os.ReadFile(os.Getenv("SANDBOX_PROBE_CANARY"))
	say("landlock", errors.Is(lerr, os.ErrPermission), "read a file outside every rule: %v", lerr)
	if os.Getenv("SANDBOX_PROBE_WAIT") != "" {
		// The host looks at this process from outside (its host
		// identity), then ends stdin.
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
	}
	return 0
}

// hostID maps a uid of this process's user namespace to the host's, by
// /proc/self/uid_map; -1 when it is unmapped.
func hostID(uid int) int {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, _ := strconv.Atoi(f[0])
		out, _ := strconv.Atoi(f[1])
		n, _ := strconv.Atoi(f[2])
		if uid >= in && uid < in+n {
			return out + uid - in
		}
	}
	return -1
}

// interfaces lists the network interfaces of this namespace.
func interfaces() []string {
	b, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return nil
	}
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		if i < 2 {
			continue
		}
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out = append(out, name)
		}
	}
	return out
}

// connect tries a TCP connection, without a timeout beyond the kernel's
// (there is no route, or Landlock refuses it at once).
func connect(ip [4]byte, port int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: ip, Port: port})
	if errors.Is(err, unix.EINPROGRESS) {
		return fmt.Errorf("connection in progress: a route out exists")
	}
	return err
}
