//go:build linux

// Command liar is a guest init that finds the agent's port and breaks
// the protocol: its hello is well formed, then, asked anything, it sends
// a frame only the host may send, on a stream the host never opened,
// with a length over the limit.
package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	unix.Mount("sysfs", "/sys", "sysfs", 0, "")
	unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	order, _ := os.ReadFile("/sandbox/modules/order")
	for _, m := range strings.Fields(string(order)) {
		f, err := os.Open("/sandbox/modules/" + m)
		if err == nil {
			unix.FinitModule(int(f.Fd()), "", 0)
			f.Close()
		}
	}
	var port *os.File
	for port == nil {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			if b, _ := os.ReadFile(n); strings.TrimSpace(string(b)) == "sandbox.agent" {
				port, _ = os.OpenFile("/dev/"+filepath.Base(filepath.Dir(n)), os.O_RDWR, 0)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	frame := func(typ byte, stream uint32, data []byte, claim uint32) {
		h := make([]byte, 9)
		binary.BigEndian.PutUint32(h, claim)
		h[4] = typ
		binary.BigEndian.PutUint32(h[5:], stream)
		port.Write(append(h, data...))
	}
	hello := []byte(`{"kernel":"liar","agent":"liar"}`)
	frame(1, 0, hello, uint32(len(hello)))
	buf := make([]byte, 1<<16)
	port.Read(buf) // setup
	frame(3, 0, []byte(`{}`), 2)
	port.Read(buf)                 // the first request
	frame(4, 999, []byte(`{}`), 2) // an exec, which only the host sends, on a stream nobody opened
	frame(7, 1, nil, 0xffffffff)   // and a length no frame may have
	for {
		time.Sleep(time.Hour)
	}
}
