package syscalltest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Syncs are the calls that make data durable.
var Syncs = []string{"fsync", "fdatasync", "syncfs", "sync", "sync_file_range", "msync"}

// Count runs fn while perf counts the named calls (their sys_enter
// tracepoints) of every thread of this process and of what they start,
// and returns the calls made of each (a name never called is absent). It
// fails where perf cannot be run or cannot count (not root, no perf, no
// tracefs: the error says).
func Count(calls []string, fn func()) (map[string]int, error) {
	bin, err := exec.LookPath("perf")
	if err != nil {
		return nil, fmt.Errorf("no perf (scripts/deps installs linux-perf): %w", err)
	}
	dir, err := os.MkdirTemp("", "syscalltest")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctl, ack := filepath.Join(dir, "ctl"), filepath.Join(dir, "ack")
	for _, p := range []string{ctl, ack} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return nil, err
		}
	}
	events := make([]string, len(calls))
	for i, c := range calls {
		events[i] = "syscalls:sys_enter_" + c
	}
	out := filepath.Join(dir, "out")
	// Counting starts disabled (-D -1) and is enabled through the
	// control fifo, whose answer says the counters are on.
	cmd := exec.Command(bin, "stat", "-x", ",", "-o", out, "-D", "-1", "--control", "fifo:"+ctl+","+ack,
		"-e", strings.Join(events, ","), "-p", strconv.Itoa(os.Getpid()))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer cmd.Process.Kill()
	c, err := os.OpenFile(ctl, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	a, err := os.Open(ack)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	acked := bufio.NewReader(a)
	command := func(s string) error {
		if _, err := io.WriteString(c, s+"\n"); err != nil {
			return err
		}
		line, err := acked.ReadString('\n')
		if err != nil {
			return fmt.Errorf("perf did not answer %q: %v (%s)", s, err, stderr.String())
		}
		if strings.Trim(line, "\x00 \n") != "ack" { // perf writes its C string's NUL too
			return fmt.Errorf("perf answered %q to %q", line, s)
		}
		return nil
	}
	if err := command("enable"); err != nil {
		return nil, err
	}
	fn()
	if err := command("disable"); err != nil {
		return nil, err
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			return nil, err
		}
	}
	return parse(out, calls)
}

// parse reads perf stat -x's lines: count,unit,event,...
func parse(path string, calls []string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	got := map[string]int{}
	seen := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) < 3 {
			continue
		}
		name, ok := strings.CutPrefix(f[2], "syscalls:sys_enter_")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("perf stat: %q: the event was not counted", strings.TrimSpace(line))
		}
		seen++
		if n > 0 {
			got[name] = n
		}
	}
	if seen != len(calls) {
		return nil, fmt.Errorf("perf stat counted %d of the %d events asked: %s", seen, len(calls), b)
	}
	return got, nil
}

// Total is the sum of the counts.
func Total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
