//go:build linux

package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/tier"
)

// outsiderEnv, set in the environment, makes this test binary the
// outsider: a host process of another user that tries to find and use a
// run's egress proxy (TestMain hands it its task).
const outsiderEnv = "SANDBOX_TEST_OUTSIDER"

func TestMain(m *testing.M) {
	if task := os.Getenv(outsiderEnv); task != "" {
		os.Exit(outsider(task))
	}
	code := m.Run()
	if s5Probed.dir != "" {
		os.RemoveAll(s5Probed.dir)
	}
	os.Exit(code)
}

// outsiderTask is what the outsider tries: every listener the test's
// processes hold (TCP in the host's network namespace, or in a run's own,
// tried from the host's; Unix sockets by path), and every network
// namespace of them to enter; and what it asks each one for: url, through
// it as a proxy, whose answer holds mark only when the run's injected
// credential came with the request.
type outsiderTask struct {
	URL  string   `json:"url"`
	Mark string   `json:"mark"`
	TCP  []string `json:"tcp"`
	Unix []string `json:"unix"`
	Pids []int    `json:"pids"`
}

// outsider runs task and prints one line per attempt: "WHAT: BLOCKED:
// why" or "WHAT: ESCAPED".
func outsider(task string) int {
	var t outsiderTask
	if err := json.Unmarshal([]byte(task), &t); err != nil {
		fmt.Println("outsider:", err)
		return 2
	}
	fmt.Printf("outsider: uid %d gid %d\n", os.Getuid(), os.Getgid())
	try := func(what string, dial func() (net.Conn, error)) {
		c, err := dial()
		if err != nil {
			fmt.Printf("%s: BLOCKED: %v\n", what, err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		u, _ := url.Parse(t.URL)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", t.URL, u.Host)
		b, err := io.ReadAll(io.LimitReader(c, 64<<10))
		switch {
		case bytes.Contains(b, []byte(t.Mark)):
			fmt.Printf("%s: ESCAPED: the run's credential went with the request\n", what)
		default:
			line, _, _ := strings.Cut(string(b), "\n")
			fmt.Printf("%s: BLOCKED: answered without the run's credential (%q, %v)\n", what, strings.TrimSpace(line), err)
		}
	}
	for _, a := range t.TCP {
		try("tcp "+a, func() (net.Conn, error) { return net.DialTimeout("tcp", a, 3*time.Second) })
	}
	for _, p := range t.Unix {
		try("unix "+p, func() (net.Conn, error) { return net.DialTimeout("unix", p, 3*time.Second) })
	}
	for _, pid := range t.Pids {
		what := fmt.Sprintf("the network namespace of pid %d", pid)
		done := make(chan struct{})
		go func() { // a thread of its own, which a namespace it enters is left with
			defer close(done)
			runtime.LockOSThread()
			f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				fmt.Printf("%s: BLOCKED: %v\n", what, err)
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				fmt.Printf("%s: BLOCKED: setns: %v\n", what, err)
				return
			}
			try(what+", entered", func() (net.Conn, error) { return net.DialTimeout("tcp", "127.0.0.1:3128", 3*time.Second) })
		}()
		<-done
	}
	return 0
}

// listeners is what an oracle (root, this test) sees of the listening
// sockets this process and every process it started (a run's init and
// program, a VM's QEMU) hold: TCP addresses (in whatever network
// namespace they are), Unix socket paths, and the processes in a network
// namespace other than this one's.
func listeners(t *testing.T) (tcp, unixPaths []string, pids []int) {
	t.Helper()
	procs := descendants(os.Getpid())
	held := map[string]bool{} // socket inodes
	mine, _ := os.Readlink("/proc/self/ns/net")
	nets := map[string]int{}
	for _, p := range procs {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p))
		for _, fd := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p, fd.Name()))
			if ino, ok := strings.CutPrefix(l, "socket:["); ok {
				held[strings.TrimSuffix(ino, "]")] = true
			}
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p)); err == nil && ns != mine {
			pids = append(pids, p) // each is tried: the run's own user's as well as its init's
			if _, ok := nets[ns]; !ok {
				nets[ns] = p
			}
		}
	}
	seen := map[string]bool{}
	netPids := []int{os.Getpid()}
	for _, p := range nets {
		netPids = append(netPids, p)
	}
	for _, p := range netPids {
		for _, f := range []string{"tcp", "tcp6"} {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p, f))
			for _, line := range strings.Split(string(b), "\n")[1:] {
				fs := strings.Fields(line)
				if len(fs) < 10 || fs[3] != "0A" || !held[fs[9]] { // 0A: listening
					continue
				}
				if a := procAddr(fs[1]); a != "" && !seen[a] {
					seen[a] = true
					tcp = append(tcp, a)
				}
			}
		}
	}
	b, _ := os.ReadFile("/proc/self/net/unix")
	for _, line := range strings.Split(string(b), "\n")[1:] {
		fs := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path; flags 00010000: listening
		if len(fs) == 8 && fs[3] == "00010000" && held[fs[6]] && strings.HasPrefix(fs[7], "/") {
			unixPaths = append(unixPaths, fs[7])
		}
	}
	return tcp, unixPaths, pids
}

// procAddr is /proc/net/tcp's hex "ADDR:PORT" as an address to dial.
func procAddr(s string) string {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	raw, herr := hex.DecodeString(h)
	if !ok || err != nil || herr != nil || (len(raw) != 4 && len(raw) != 16) {
		return ""
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 { // each 32-bit word in host (little-endian) order
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// descendants is pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// outsiderRun runs a copy of this test binary as nobody against what
// the test's processes listen on now, and returns its report.
func outsiderRun(t *testing.T, bin, target, mark string) string {
	t.Helper()
	tcp, ux, pids := listeners(t)
	task, _ := json.Marshal(outsiderTask{URL: target, Mark: mark, TCP: tcp, Unix: ux, Pids: pids})
	cmd := exec.Command(bin)
	cmd.Env = []string{outsiderEnv + "=" + string(task), "PATH=/usr/bin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the outsider: %v\n%s", err, out)
	}
	report := string(out)
	if !strings.HasPrefix(report, "outsider: uid 65534 gid 65534\n") || strings.Contains(report, "ESCAPED") {
		t.Fatalf("the outsider:\n%s", report)
	}
	return report
}

// outsiderBinary is a copy of this test binary that nobody may run.
func outsiderBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "outsider")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// credentialServer answers mark only to a request that carries secret
// as its Authorization: what the run's injected credential buys.
func credentialServer(t *testing.T, secret, mark string) (string, int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != secret {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, mark)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/", srv.Listener.Addr().(*net.TCPAddr).Port
}

// TestEgressProxyServesOnlyItsRun attacks the egress proxies of a
// running S1 run, a live S1 sandbox, a running S5 run and a live S5
// sandbox (before and after a suspension, when its VM reaches a new
// proxy) from a host process running as nobody: given every listener
// the test's processes hold (found as root) and every network namespace
// they are in, it tries each as a proxy to the granted server, which
// answers only to the run's injected credential, and tries to enter
// each namespace. Every attempt fails: S1's proxy listens only in the
// run's own network namespace, which another user cannot enter; S5's on
// a Unix socket in the VM's own directory, which another user cannot
// reach. Meanwhile the run's own requests get through with the
// credential, each in the run's decision log. At S5 a connection from a
// process that can reach the socket (root, here) but is not the VM's
// QEMU is closed unserved, and said in the run's log.
func TestEgressProxyServesOnlyItsRun(t *testing.T) {
	h := newS1Host(t)
	addS5(t, h)
	bin := outsiderBinary(t)
	const secret = "Bearer sbx-outsider-5e1c7d"
	mark := fmt.Sprintf("granted-%d", time.Now().UnixNano())
	target, port := credentialServer(t, secret, mark)
	t.Setenv("SANDBOX_TEST_OUTSIDER_TOKEN", secret)
	g, err := grant.ParseArgs([]string{"cpu:5000J", fmt.Sprintf("net:127.0.0.1:%d", port)}, "/") // a budget a TCG boot does not spend
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Inject(fmt.Sprintf("http://127.0.0.1:%d:Authorization=env:SANDBOX_TEST_OUTSIDER_TOKEN", port)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fetch := "curl -sS " + target
	logged := func(t *testing.T, what, dir string) {
		t.Helper()
		db, _ := os.ReadFile(filepath.Join(dir, "decisions.json"))
		if !strings.Contains(string(db), fmt.Sprintf(`"target":"127.0.0.1:%d"`, port)) || !strings.Contains(string(db), "Authorization from env:SANDBOX_TEST_OUTSIDER_TOKEN") || strings.Contains(string(db), secret) {
			t.Fatalf("%s: the decision log does not hold the run's request, or holds its secret:\n%s", what, db)
		}
	}

	// A one-shot run that fetches, waits while the outsider tries, and
	// fetches again.
	oneShot := func(t *testing.T, s5 bool) {
		rw := t.TempDir()
		os.Chmod(rw, 0o777)
		script := fetch + "; echo; : > " + rw + "/ready; while [ ! -e " + rw + "/go ]; do sleep 0.1; done; " + fetch
		gs := g.Clone()
		gs.Storage = append(gs.Storage, grant.Storage{Path: rw, Mode: grant.RW})
		var at *tier.Tier
		if s5 {
			s := tier.S5
			at, gs.Kernel = &s, true
		}
		req, err := host.Command(host.CommandLine{Args: []string{"/bin/sh", "-c", script}, Grants: gs, Cwd: "/"})
		if err != nil {
			t.Fatal(err)
		}
		req.Tier, req.Deadline = at, 2*time.Minute
		var out, errb bytes.Buffer
		req.Stdout, req.Stderr = &out, &errb
		type ran struct {
			r   *host.Run
			err error
		}
		done := make(chan ran, 1)
		go func() { r, err := h.Run(ctx, req); done <- ran{r, err} }()
		defer os.WriteFile(filepath.Join(rw, "go"), nil, 0o644)
		for {
			if _, err := os.Stat(filepath.Join(rw, "ready")); err == nil {
				break
			}
			select {
			case r := <-done:
				t.Fatalf("the run ended before it was ready: %v %q %s", r.err, out.String(), errb.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		report := outsiderRun(t, bin, target, mark)
		t.Logf("the outsider, while the run waits:\n%s", report)
		if s5 {
			sock := egressSocket(t, report)
			intruder(t, sock, target)
		} else {
			netnsBlocked(t, report)
		}
		os.WriteFile(filepath.Join(rw, "go"), nil, 0o644)
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if out.String() != mark+"\n"+mark || r.r.Result.Outcome.ExitCode == nil || *r.r.Result.Outcome.ExitCode != 0 {
			t.Fatalf("the run's own requests: %q %+v\n%s", out.String(), r.r.Result.Outcome, errb.String())
		}
		logged(t, "the run", r.r.Dir)
		if s5 {
			db, _ := os.ReadFile(filepath.Join(r.r.Dir, "decisions.json"))
			if !strings.Contains(string(db), "not the run's VM: refused unserved") {
				t.Fatalf("the intruder's connection is not in the run's log:\n%s", db)
			}
		}
	}
	live := func(t *testing.T, at tier.Tier) {
		info, err := h.Create(ctx, SandboxSpec{Tier: at, Grants: g})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Remove(info.ID, "")
		fetchIn := func(i int) {
			r, out := execIn(t, h, info.ID, "/bin/sh", "-c", "cd /; "+fetch)
			if out != mark {
				t.Fatalf("exec %d: %q %+v", i, out, r.Result.Outcome)
			}
			logged(t, fmt.Sprintf("exec %d", i), r.Dir)
		}
		fetchIn(0)
		report := outsiderRun(t, bin, target, mark)
		t.Logf("the outsider, while the sandbox lives:\n%s", report)
		if at == tier.S5 {
			egressSocket(t, report)
			if _, err := h.Suspend(ctx, info.ID, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := h.Resume(ctx, info.ID, ""); err != nil {
				t.Fatal(err)
			}
			report := outsiderRun(t, bin, target, mark)
			t.Logf("the outsider, after a resumption:\n%s", report)
			egressSocket(t, report)
		} else {
			netnsBlocked(t, report)
		}
		fetchIn(1)
	}
	t.Run("S1 run", func(t *testing.T) { oneShot(t, false) })
	t.Run("S1 sandbox", func(t *testing.T) { live(t, tier.S1) })
	t.Run("S5 run", func(t *testing.T) { oneShot(t, true) })
	t.Run("S5 sandbox", func(t *testing.T) { live(t, tier.S5) })
}

// netnsBlocked: the outsider found the S1 run's own network namespace
// (where its proxy listens) and could not enter it.
func netnsBlocked(t *testing.T, report string) {
	t.Helper()
	if !strings.Contains(report, "the network namespace of pid ") || strings.Contains(report, ", entered") {
		t.Fatalf("the outsider did not find the run's network namespace, or entered it:\n%s", report)
	}
	if !strings.Contains(report, ":3128: BLOCKED") {
		t.Fatalf("the oracle did not hand the outsider the run's proxy (port 3128 in its namespace):\n%s", report)
	}
}

// egressSocket: the outsider was handed the VM's egress socket and could
// not connect to it; its path.
func egressSocket(t *testing.T, report string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(report))
	for sc.Scan() {
		l := sc.Text()
		if p, rest, ok := strings.Cut(strings.TrimPrefix(l, "unix "), ": "); ok && strings.HasPrefix(l, "unix ") && filepath.Base(p) == "egress.sock" {
			if !strings.Contains(rest, "permission denied") {
				t.Fatalf("the VM's egress socket, to the outsider: %s", l)
			}
			return p
		}
	}
	t.Fatalf("the oracle did not hand the outsider the VM's egress socket:\n%s", report)
	return ""
}

// intruder connects to the VM's egress socket as root, which may reach
// it, and asks for target: it is closed unserved, not being the VM.
func intruder(t *testing.T, sock, target string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("root could not reach the socket: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
	b, err := io.ReadAll(c)
	if len(b) != 0 {
		t.Fatalf("a connection not from the VM was served: %q (%v)", b, err)
	}
}
