package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal: the side a program writes to,
// and the side the test reads what a person would have seen from.
func openTerminal(t *testing.T) (person, program *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// runOnTerminal runs the CLI with its stderr on a terminal: its stdout,
// what the terminal showed, and its exit status.
func runOnTerminal(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	person, program := openTerminal(t)
	cmd := cliCmd(t, home, nil, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, program
	shown := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(person) // until the terminal's last writer closes: EIO
		shown <- b
	}()
	err := cmd.Run()
	program.Close()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), string(<-shown), cmd.ProcessState.ExitCode()
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWatchCommand: `sandbox watch -r` through a running service prints
// what execs make in the sandbox, a directory made after it began
// included, and ends, exit 0, when the sandbox is removed; a path outside
// the sandbox's grants is refused before anything streams.
func TestWatchCommand(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("live S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	out, e, code := runCLI(t, home, "", "create", "--json")
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	var sb struct{ ID, Workspace string }
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatal(err)
	}
	if _, e, code := runCLI(t, home, "", "watch", sb.ID+":/etc"); code != 6 || !strings.Contains(e, "storage grants") {
		t.Fatalf("a watch outside the grants: %d %s", code, e)
	}
	cmd := cliCmd(t, home, nil, "watch", "-r", sb.ID+":"+sb.Workspace)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// Once the watch is in place, a file made is reported: a new one made
	// until one is (the watch's start is not a measure; a file made
	// before it was in place is never reported).
	for i := 0; ; i++ {
		runCLI(t, home, "", "exec", "-q", sb.ID, "--", "touch", fmt.Sprintf("ready-%d", i))
		deadline := time.After(200 * time.Millisecond)
	wait:
		for {
			select {
			case l := <-lines:
				if strings.HasPrefix(l, "create "+sb.Workspace+"/ready-") {
					goto ready
				}
			case <-deadline:
				break wait
			}
		}
		if i == 600 {
			t.Fatalf("never watching: %s", errb.String())
		}
	}
ready:
	runCLI(t, home, "", "exec", "-q", sb.ID, "--", "sh", "-c", "mkdir d && echo x > d/f")
	want := map[string]bool{"create " + sb.Workspace + "/d/": false, "create " + sb.Workspace + "/d/f": false}
	for left := len(want); left > 0; {
		select {
		case l := <-lines:
			if seen, ok := want[l]; ok && !seen {
				want[l] = true
				left--
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("not reported: %v (stderr %s)", want, errb.String())
		}
	}
	if _, e, code := runCLI(t, home, "", "rm", sb.ID); code != 0 {
		t.Fatalf("rm: %d %s", code, e)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(errb.String(), "sandbox: ended:") {
		t.Fatalf("the watch after its sandbox was removed: %v %s", err, errb.String())
	}
}
