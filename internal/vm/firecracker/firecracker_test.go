package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/opensubstrate/sandbox/internal/vm/firecracker/apischema"
)

func loadAPI(t *testing.T) *apischema.API {
	t.Helper()
	a, err := apischema.Load("testdata/firecracker-api.json")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fakeFirecracker serves the API on a Unix socket, checking every
// request against the schema; it answers 204, or 400 with Firecracker's
// fault_message shape for a request the schema refuses.
type fakeFirecracker struct {
	a        *apischema.API
	mu       sync.Mutex
	seen     []string
	problems []string
}

func (f *fakeFirecracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := f.validate(r)
	f.mu.Lock()
	f.seen = append(f.seen, r.Method+" "+r.URL.Path)
	if err != nil {
		f.problems = append(f.problems, err.Error())
	}
	f.mu.Unlock()
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"fault_message": err.Error()})
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/" {
		json.NewEncoder(w).Encode(Info{ID: "anonymous-instance", State: "Running", Version: "1.17.0-dev", App: "Firecracker"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeFirecracker) validate(r *http.Request) error { return f.a.Request(r) }

func serveFake(t *testing.T) (*fakeFirecracker, *Client) {
	t.Helper()
	f := &fakeFirecracker{a: loadAPI(t)}
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f, New(sock)
}

// TestDriverRequestsMatchThePublishedAPI drives a whole VM life — set
// up, start, pause, snapshot, resume, and a restore into a new process —
// against a fake Firecracker that checks every request against the API
// schema Firecracker publishes.
func TestDriverRequestsMatchThePublishedAPI(t *testing.T) {
	f, c := serveFake(t)
	ctx := context.Background()
	steps := []func() error{
		func() error {
			return c.Configure(ctx, Machine{VCPUs: 2, MemoryMiB: 512}, Boot{Kernel: "/k", Initrd: "/i", Cmdline: "console=ttyS0"},
				[]Drive{{ID: "rootfs", Path: "/r.ext4", Root: true, ReadOnly: true}}, &Vsock{CID: 3, Path: "/v.sock"})
		},
		func() error { return c.Start(ctx) },
		func() error { _, err := c.Describe(ctx); return err },
		func() error { return c.Pause(ctx) },
		func() error { return c.Snapshot(ctx, "/s.state", "/s.mem") },
		func() error { return c.Resume(ctx) },
		func() error { return c.Load(ctx, "/s.state", "/s.mem", true) },
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if len(f.problems) > 0 {
		t.Fatalf("requests the API refuses:\n%s", strings.Join(f.problems, "\n"))
	}
	want := []string{"PUT /machine-config", "PUT /boot-source", "PUT /drives/rootfs", "PUT /vsock", "PUT /actions", "GET /", "PATCH /vm", "PUT /snapshot/create", "PATCH /vm", "PUT /snapshot/load"}
	if strings.Join(f.seen, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", f.seen, want)
	}
}

// TestTheSchemaCheckCanFail: the fake refuses what Firecracker would, so
// the test above is not vacuous; and a refusal reaches the caller with
// its fault message.
func TestTheSchemaCheckCanFail(t *testing.T) {
	f, c := serveFake(t)
	ctx := context.Background()
	cases := []struct {
		method, path string
		body         any
		want         string
	}{
		{"PUT", "/machine-config", map[string]any{"vcpu_count": 2}, `required member "mem_size_mib"`},
		{"PUT", "/machine-config", map[string]any{"vcpu_count": "2", "mem_size_mib": 1}, "want an integer"},
		{"PUT", "/actions", map[string]any{"action_type": "Reboot"}, "is not one of"},
		{"PUT", "/vsock", map[string]any{"guest_cid": 2, "uds_path": "/v"}, "under the minimum"},
		{"PUT", "/boot-source", map[string]any{"kernel_image_path": "/k", "kernel": "x"}, `unknown member "kernel"`},
		{"DELETE", "/vm", nil, "no such method"},
		{"PUT", "/nowhere", map[string]any{}, "no such path"},
	}
	for _, tc := range cases {
		err := c.do(ctx, tc.method, tc.path, tc.body, nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Fault, tc.want) {
			t.Errorf("%s %s: %v, want a 400 saying %q", tc.method, tc.path, err, tc.want)
		}
	}
	if len(f.problems) != len(cases) {
		t.Fatalf("problems %d, want %d", len(f.problems), len(cases))
	}
}

// TestEveryDefinitionTheDriverUsesExists: the schema file is the one the
// driver was written against (its paths are there).
func TestEveryDefinitionTheDriverUsesExists(t *testing.T) {
	a := loadAPI(t)
	var missing []string
	for _, p := range []string{"/machine-config", "/boot-source", "/drives/{drive_id}", "/vsock", "/actions", "/vm", "/snapshot/create", "/snapshot/load", "/"} {
		if _, ok := a.Paths[p]; !ok {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("not in the API: %v", missing)
	}
}

// TestProbeSaysWhy: no binary here; a binary without KVM: unavailable,
// each with its reason; a binary with a KVM device it opens: on to the
// boot that earns the rung.
func TestProbeSaysWhy(t *testing.T) {
	if p := Probe(filepath.Join(t.TempDir(), "firecracker"), ""); p.Available || !strings.Contains(p.Reason, "no firecracker binary") {
		t.Fatalf("no binary: %+v", p)
	}
	bin := filepath.Join(t.TempDir(), "firecracker")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	if p := Probe(bin, filepath.Join(t.TempDir(), "kvm")); p.Available || !strings.Contains(p.Reason, "needs KVM") {
		t.Fatalf("no KVM: %+v", p)
	}
	kvm := filepath.Join(t.TempDir(), "kvm")
	os.WriteFile(kvm, nil, 0o600)
	if p := Probe(bin, kvm); !p.Available {
		t.Fatalf("binary and KVM: %+v", p)
	}
}
