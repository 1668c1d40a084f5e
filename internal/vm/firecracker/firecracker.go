package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/opensubstrate/sandbox/tier"
)

// Client speaks to one Firecracker process's API socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// New returns a client of the API socket at path.
func New(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{Socket: path, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// APIError is a request Firecracker refused.
type APIError struct {
	Method, Path string
	Status       int
	Fault        string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("firecracker: %s %s: %d %s", e.Method, e.Path, e.Status, e.Fault)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var f struct {
			Fault string `json:"fault_message"`
		}
		json.Unmarshal(b, &f)
		if f.Fault == "" {
			f.Fault = string(bytes.TrimSpace(b))
		}
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, Fault: f.Fault}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("firecracker: %s %s: its answer: %w", method, path, err)
		}
	}
	return nil
}

// Machine is the VM's size.
type Machine struct {
	VCPUs     int  `json:"vcpu_count"`
	MemoryMiB int  `json:"mem_size_mib"`
	SMT       bool `json:"smt"`
}

// Boot is the kernel, initramfs and command line.
type Boot struct {
	Kernel  string `json:"kernel_image_path"`
	Initrd  string `json:"initrd_path,omitempty"`
	Cmdline string `json:"boot_args,omitempty"`
}

// Drive is a block device.
type Drive struct {
	ID       string `json:"drive_id"`
	Path     string `json:"path_on_host"`
	Root     bool   `json:"is_root_device"`
	ReadOnly bool   `json:"is_read_only"`
}

// Vsock is the guest's vsock device, backed by a host Unix socket.
type Vsock struct {
	CID  uint32 `json:"guest_cid"`
	Path string `json:"uds_path"`
}

// Info is what GET / answers.
type Info struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Version string `json:"vmm_version"`
	App     string `json:"app_name"`
}

// Configure sets up a VM before it starts: its size, boot source, drives
// and vsock (nil for none).
func (c *Client) Configure(ctx context.Context, m Machine, b Boot, drives []Drive, v *Vsock) error {
	if err := c.do(ctx, http.MethodPut, "/machine-config", m, nil); err != nil {
		return err
	}
	if err := c.do(ctx, http.MethodPut, "/boot-source", b, nil); err != nil {
		return err
	}
	for _, d := range drives {
		if err := c.do(ctx, http.MethodPut, "/drives/"+d.ID, d, nil); err != nil {
			return err
		}
	}
	if v != nil {
		return c.do(ctx, http.MethodPut, "/vsock", v, nil)
	}
	return nil
}

// Start boots the configured VM.
func (c *Client) Start(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/actions", map[string]string{"action_type": "InstanceStart"}, nil)
}

// Pause and Resume stop and continue the VM's vCPUs.
func (c *Client) Pause(ctx context.Context) error {
	return c.do(ctx, http.MethodPatch, "/vm", map[string]string{"state": "Paused"}, nil)
}

func (c *Client) Resume(ctx context.Context) error {
	return c.do(ctx, http.MethodPatch, "/vm", map[string]string{"state": "Resumed"}, nil)
}

// Snapshot writes a paused VM's full snapshot: its state and its memory.
func (c *Client) Snapshot(ctx context.Context, state, memory string) error {
	return c.do(ctx, http.MethodPut, "/snapshot/create", map[string]string{"snapshot_path": state, "mem_file_path": memory, "snapshot_type": "Full"}, nil)
}

// Load restores a snapshot into a fresh Firecracker process, resuming it
// when resume is set.
func (c *Client) Load(ctx context.Context, state, memory string, resume bool) error {
	body := map[string]any{"snapshot_path": state, "mem_backend": map[string]string{"backend_type": "File", "backend_path": memory}, "resume_vm": resume}
	return c.do(ctx, http.MethodPut, "/snapshot/load", body, nil)
}

// Describe is GET /.
func (c *Client) Describe(ctx context.Context) (Info, error) {
	var i Info
	err := c.do(ctx, http.MethodGet, "/", nil, &i)
	return i, err
}

// Probe checks what Firecracker needs before anything boots: the binary
// ("" for firecracker on PATH) and a KVM device it can open (kvm, ""
// for /dev/kvm). The S5 executor then boots a guest through it to earn
// the rung.
func Probe(binary, kvm string) tier.Probe {
	if binary == "" {
		binary = "firecracker"
	}
	p, err := exec.LookPath(binary)
	if err != nil {
		return tier.Probe{Reason: "no firecracker binary (" + err.Error() + "; none is packaged for Debian)"}
	}
	if kvm == "" {
		kvm = "/dev/kvm"
	}
	f, err := os.OpenFile(kvm, os.O_RDWR, 0)
	if err != nil {
		return tier.Probe{Reason: p + " is present, but Firecracker needs KVM: " + err.Error()}
	}
	f.Close()
	return tier.Probe{Available: true, Reason: p + " and " + kvm + " are present"}
}
