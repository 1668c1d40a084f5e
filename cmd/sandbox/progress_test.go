package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

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
