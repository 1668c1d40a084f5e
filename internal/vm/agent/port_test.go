//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPortReadWaitsForTheHost: a read of the agent's port while no host
// is connected (the kernel answers end of file, as a FIFO with no writer
// does) waits for the host to connect and write, as after a VM resumed
// from a memory image; the agent does not take it for its end.
func TestPortReadWaitsForTheHost(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "port")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the stand-in port does not read as a port with no host: %d %v", n, err)
	}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, err := serialPort{f}.Read(b)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:n])
	}()
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // the host connects
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("setup")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "setup" {
		t.Fatalf("read %q, want the host's frame", s)
	}
}
