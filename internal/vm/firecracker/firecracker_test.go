package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// api is Firecracker's published API schema (Swagger 2.0).
type api struct {
	Paths       map[string]map[string]operation `json:"paths"`
	Definitions map[string]*schema              `json:"definitions"`
}

type operation struct {
	Parameters []struct {
		In       string  `json:"in"`
		Name     string  `json:"name"`
		Required bool    `json:"required"`
		Schema   *schema `json:"schema"`
	} `json:"parameters"`
	Responses map[string]struct {
		Schema *schema `json:"schema"`
	} `json:"responses"`
}

type schema struct {
	Ref        string             `json:"$ref"`
	Type       string             `json:"type"`
	Required   []string           `json:"required"`
	Properties map[string]*schema `json:"properties"`
	Enum       []any              `json:"enum"`
	Items      *schema            `json:"items"`
	Minimum    *float64           `json:"minimum"`
}

func loadAPI(t *testing.T) *api {
	t.Helper()
	b, err := os.ReadFile("testdata/firecracker-api.json")
	if err != nil {
		t.Fatal(err)
	}
	var a api
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

func (a *api) resolve(s *schema) *schema {
	for s != nil && s.Ref != "" {
		s = a.Definitions[strings.TrimPrefix(s.Ref, "#/definitions/")]
	}
	return s
}

// check validates v against s: types, required members, enums, minimums,
// and no member the schema does not name (Firecracker refuses those).
func (a *api) check(s *schema, v any, at string) error {
	s = a.resolve(s)
	if s == nil {
		return fmt.Errorf("%s: no schema", at)
	}
	if len(s.Enum) > 0 {
		ok := false
		for _, e := range s.Enum {
			ok = ok || e == v
		}
		if !ok {
			return fmt.Errorf("%s: %v is not one of %v", at, v, s.Enum)
		}
	}
	switch s.Type {
	case "object", "":
		m, ok := v.(map[string]any)
		if !ok {
			if s.Type == "" {
				return nil
			}
			return fmt.Errorf("%s: want an object, got %T", at, v)
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				return fmt.Errorf("%s: required member %q is missing", at, r)
			}
		}
		for k, mv := range m {
			ps, ok := s.Properties[k]
			if !ok && s.Properties != nil {
				return fmt.Errorf("%s: unknown member %q", at, k)
			}
			if ok {
				if err := a.check(ps, mv, at+"."+k); err != nil {
					return err
				}
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string, got %T", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", at, v)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok || (s.Type == "integer" && f != float64(int64(f))) {
			return fmt.Errorf("%s: want an %s, got %v", at, s.Type, v)
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Errorf("%s: %v is under the minimum %v", at, f, *s.Minimum)
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array", at)
		}
		for i, x := range l {
			if err := a.check(s.Items, x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// route finds the operation for a request's method and path, matching
// path templates ({drive_id}).
func (a *api) route(method, path string) (operation, error) {
	for tmpl, ops := range a.Paths {
		ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
		if len(ts) != len(ps) {
			continue
		}
		match := true
		for i := range ts {
			if !(strings.HasPrefix(ts[i], "{") && ps[i] != "") && ts[i] != ps[i] {
				match = false
			}
		}
		if match {
			op, ok := ops[strings.ToLower(method)]
			if !ok {
				return op, fmt.Errorf("%s %s: the API has no such method on %s", method, path, tmpl)
			}
			return op, nil
		}
	}
	return operation{}, fmt.Errorf("%s %s: no such path in the API", method, path)
}

// fakeFirecracker serves the API on a Unix socket, checking every
// request against the schema; it answers 204, or 400 with Firecracker's
// fault_message shape for a request the schema refuses.
type fakeFirecracker struct {
	a        *api
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

func (f *fakeFirecracker) validate(r *http.Request) error {
	op, err := f.a.route(r.Method, r.URL.Path)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(r.Body)
	for _, p := range op.Parameters {
		if p.In != "body" {
			continue
		}
		if len(b) == 0 {
			if p.Required {
				return fmt.Errorf("%s %s: the body is required", r.Method, r.URL.Path)
			}
			return nil
		}
		if r.Header.Get("Content-Type") != "application/json" {
			return fmt.Errorf("%s %s: content type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
		}
		return f.a.check(p.Schema, v, r.Method+" "+r.URL.Path)
	}
	if len(b) > 0 {
		return fmt.Errorf("%s %s: a body where the API takes none", r.Method, r.URL.Path)
	}
	return nil
}

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

// TestProbeSaysWhy: no binary here; a binary without KVM; a binary with
// a KVM device: never available, each with its reason.
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
	if p := Probe(bin, kvm); p.Available || !strings.Contains(p.Reason, "vsock transport is not built") {
		t.Fatalf("binary and KVM: %+v", p)
	}
}
