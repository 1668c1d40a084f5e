//go:build linux

// Command fakefc stands in for the firecracker binary in the S5 tests,
// on a machine with neither Firecracker nor KVM: it serves Firecracker's
// API on --api-sock, checking every request against the published
// schema ($SANDBOX_FAKEFC_SCHEMA) and logging each with its verdict
// ($SANDBOX_FAKEFC_LOG); on InstanceStart it boots the configured kernel
// and initramfs under QEMU's microvm machine (TCG), and serves the vsock
// device's host side as Firecracker documents it: a connection to the
// vsock Unix socket that sends "CONNECT <port>\n" is answered "OK ...\n"
// once the guest listens on that port (here: once the guest agent has
// spoken on its virtio-serial port, to which the connection is then
// joined), and closed otherwise. The guest's serial console goes to
// stdout, as Firecracker's does. It ends when the guest does.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/firecracker/apischema"
)

type state struct {
	mu      sync.Mutex
	machine struct {
		VCPUs int `json:"vcpu_count"`
		Mem   int `json:"mem_size_mib"`
	}
	boot struct {
		Kernel string `json:"kernel_image_path"`
		Initrd string `json:"initrd_path"`
		Args   string `json:"boot_args"`
	}
	vsock struct {
		CID  int    `json:"guest_cid"`
		Path string `json:"uds_path"`
	}
	started bool
	log     *os.File
}

func main() {
	sock := ""
	for i, a := range os.Args {
		if a == "--api-sock" && i+1 < len(os.Args) {
			sock = os.Args[i+1]
		}
	}
	if sock == "" {
		fmt.Fprintln(os.Stderr, "fakefc: --api-sock PATH is required")
		os.Exit(2)
	}
	api, err := apischema.Load(os.Getenv("SANDBOX_FAKEFC_SCHEMA"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakefc:", err)
		os.Exit(2)
	}
	st := &state{}
	if p := os.Getenv("SANDBOX_FAKEFC_LOG"); p != "" {
		st.log, _ = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakefc:", err)
		os.Exit(1)
	}
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		err := api.Request(r)
		if st.log != nil {
			fmt.Fprintf(st.log, "%s %s %v\n", r.Method, r.URL.Path, err)
		}
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]string{"fault_message": err.Error()})
			return
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		switch r.URL.Path {
		case "/machine-config":
			json.Unmarshal(body, &st.machine)
		case "/boot-source":
			json.Unmarshal(body, &st.boot)
		case "/vsock":
			json.Unmarshal(body, &st.vsock)
		case "/actions":
			if st.started || st.boot.Kernel == "" || st.vsock.Path == "" {
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(map[string]string{"fault_message": "the microVM is started, or not configured"})
				return
			}
			if err := st.start(); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				json.NewEncoder(w).Encode(map[string]string{"fault_message": err.Error()})
				return
			}
			st.started = true
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

// start boots the guest under QEMU and serves the vsock socket.
func (st *state) start() error {
	dir := filepath.Dir(st.vsock.Path)
	serial := filepath.Join(dir, "fakefc-agent.sock")
	args := st.boot.Args + boot.TCGClock() // the stand-in runs the guest under TCG
	q := exec.Command("qemu-system-x86_64", "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-display", "none", "-accel", "tcg,tb-size=64", "-cpu", "max", "-m", strconv.Itoa(max(st.machine.Mem, 128))+"M", "-smp", strconv.Itoa(max(st.machine.VCPUs, 1)),
		"-kernel", st.boot.Kernel, "-initrd", st.boot.Initrd, "-append", args, "-serial", "stdio",
		"-chardev", "socket,id=a,path="+serial+",server=on,wait=off", "-device", "virtio-serial-device", "-device", "virtserialport,chardev=a,name=sandbox.agent")
	q.Stdout, q.Stderr = os.Stdout, os.Stderr
	q.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := q.Start(); err != nil {
		return err
	}
	go func() { q.Wait(); os.Exit(0) }() // Firecracker ends with its guest
	var guest net.Conn
	for guest == nil {
		c, err := net.Dial("unix", serial)
		if err == nil {
			guest = c
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The guest "listens" once its agent has spoken: hold what it said.
	first := make([]byte, 1<<16)
	ready := make(chan int, 1)
	go func() {
		n, _ := guest.Read(first)
		ready <- n
	}()
	vln, err := net.Listen("unix", st.vsock.Path)
	if err != nil {
		return err
	}
	go func() {
		n := -1
		for {
			c, err := vln.Accept()
			if err != nil {
				return
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "CONNECT 1024\n" {
				c.Close()
				continue
			}
			if n < 0 {
				select {
				case n = <-ready:
				default:
					c.Close() // nothing listens in the guest yet
					continue
				}
			}
			fmt.Fprintf(c, "OK 1073741824\n")
			c.Write(first[:n])
			go io.Copy(guest, c)
			io.Copy(c, guest)
			c.Close()
			return
		}
	}()
	return nil
}
