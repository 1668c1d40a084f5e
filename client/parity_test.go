package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// calls are the Go client's calls, one per operation of the OpenAPI
// document (METHOD PATH, as docs/openapi.json writes the path).
var calls = map[string]func(c *Client, ctx context.Context){
	"GET /v1/health":       func(c *Client, ctx context.Context) { c.Health(ctx) },
	"GET /v1/openapi.json": func(c *Client, ctx context.Context) { c.OpenAPI(ctx) },
	"GET /metrics":         func(c *Client, ctx context.Context) { c.Metrics(ctx) },
	"GET /v1/key":          func(c *Client, ctx context.Context) { c.HostKey(ctx) },
	"POST /v1/runs": func(c *Client, ctx context.Context) {
		c.Run(ctx, ExecSpec{Args: []string{"x"}}, io.Discard, io.Discard)
	},
	"GET /v1/runs/{id}":           func(c *Client, ctx context.Context) { c.RunReport(ctx, "r") },
	"GET /v1/runs/{id}/bundle":    func(c *Client, ctx context.Context) { c.RunBundle(ctx, "r", io.Discard) },
	"POST /v1/sandboxes":          func(c *Client, ctx context.Context) { c.Create(ctx, SandboxSpec{}) },
	"GET /v1/sandboxes":           func(c *Client, ctx context.Context) { c.List(ctx) },
	"GET /v1/pools":               func(c *Client, ctx context.Context) { c.Pools(ctx) },
	"POST /v1/pools/{name}/claim": func(c *Client, ctx context.Context) { c.Claim(ctx, "p") },
	"GET /v1/sandboxes/{id}":      func(c *Client, ctx context.Context) { c.Get(ctx, "sb") },
	"DELETE /v1/sandboxes/{id}":   func(c *Client, ctx context.Context) { c.Remove(ctx, "sb") },
	"POST /v1/sandboxes/{id}/exec": func(c *Client, ctx context.Context) {
		c.Exec(ctx, "sb", ExecSpec{Args: []string{"x"}}, io.Discard, io.Discard)
	},
	"PUT /v1/sandboxes/{id}/files": func(c *Client, ctx context.Context) { c.Upload(ctx, "sb", "/p", strings.NewReader("x"), 0o644) },
	"GET /v1/sandboxes/{id}/files": func(c *Client, ctx context.Context) { c.Download(ctx, "sb", "/p", io.Discard) },
	"GET /v1/sandboxes/{id}/watch": func(c *Client, ctx context.Context) {
		c.Watch(ctx, "sb", "/p", true, func(WatchEvent) error { return nil })
	},
	"POST /v1/interrupts/{key}":              func(c *Client, ctx context.Context) { c.Interrupt(ctx, "k") },
	"POST /v1/sandboxes/{id}/suspend":        func(c *Client, ctx context.Context) { c.Suspend(ctx, "sb") },
	"POST /v1/sandboxes/{id}/fork":           func(c *Client, ctx context.Context) { c.Fork(ctx, "sb", ForkSpec{Count: 2}) },
	"POST /v1/sandboxes/{id}/ports":          func(c *Client, ctx context.Context) { c.Expose(ctx, "sb", PreviewSpec{Port: 8000}) },
	"GET /v1/sandboxes/{id}/ports":           func(c *Client, ctx context.Context) { c.Previews(ctx, "sb") },
	"DELETE /v1/sandboxes/{id}/ports/{port}": func(c *Client, ctx context.Context) { c.Unexpose(ctx, "sb", 8000) },
	"POST /v1/sandboxes/{id}/resume":         func(c *Client, ctx context.Context) { c.Resume(ctx, "sb") },
	"POST /v1/sandboxes/{id}/close":          func(c *Client, ctx context.Context) { c.CloseRecord(ctx, "sb") },
	"GET /v1/records":                        func(c *Client, ctx context.Context) { c.Records(ctx) },
	"POST /v1/fleets":                        func(c *Client, ctx context.Context) { c.Fleet(ctx, FleetSpec{}, nil) },
	"POST /v1/sandboxes/{id}/seed":           func(c *Client, ctx context.Context) { c.Seed(ctx, "sb", SeedSpec{}) },
	"POST /v1/sandboxes/{id}/preservation":   func(c *Client, ctx context.Context) { c.Receipt(ctx, "sb", ReceiptSpec{}) },
	"GET /v1/jcp":                            func(c *Client, ctx context.Context) { c.JCPInfo(ctx) },
	"GET /v1/jcp/ledger":                     func(c *Client, ctx context.Context) { c.JCPLedger(ctx) },
	"POST /v1/jcp/ledger/verify":             func(c *Client, ctx context.Context) { c.JCPVerifyLedger(ctx) },
	"POST /v1/jcp/chains":                    func(c *Client, ctx context.Context) { c.JCPAdmit(ctx, nil) },
	"POST /v1/jcp/chains/verify":             func(c *Client, ctx context.Context) { c.JCPVerifyChain(ctx, nil) },
	"POST /v1/jcp/chains/budget":             func(c *Client, ctx context.Context) { c.JCPBudgets(ctx, nil) },
	"POST /v1/jcp/revocations":               func(c *Client, ctx context.Context) { c.JCPRevoke(ctx, nil, nil) },
	"POST /v1/jcp/amendments":                func(c *Client, ctx context.Context) { c.JCPAmend(ctx, nil, nil) },
	"POST /v1/jcp/policies":                  func(c *Client, ctx context.Context) { c.JCPPolicy(ctx, nil) },
	"POST /v1/jcp/events":                    func(c *Client, ctx context.Context) { c.JCPEvent(ctx, "e") },
	"POST /v1/jcp/checkpoints":               func(c *Client, ctx context.Context) { c.JCPCheckpoint(ctx, nil, nil) },
}

// operations are the OpenAPI document's operations, each with a pattern
// its concrete paths match.
func operations(t *testing.T) map[string]*regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[string]*regexp.Regexp{}
	for p, ms := range doc.Paths {
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$")
		for m := range ms {
			switch m {
			case "get", "post", "put", "delete", "patch":
				ops[strings.ToUpper(m)+" "+p] = re
			}
		}
	}
	return ops
}

// TestClientCoversTheAPI: one API, one Go client: every operation of
// docs/openapi.json has a call of the client, and each call sends that
// operation's method and path and no other (recorded by a server that
// answers nothing useful: only the requests matter).
func TestClientCoversTheAPI(t *testing.T) {
	ops := operations(t)
	var (
		mu   sync.Mutex
		seen []string
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(404)
		io.WriteString(w, `{"category":"not-found","message":"recorded"}`)
	}))
	defer ts.Close()
	c, err := Dial(ts.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for op := range ops {
		if _, ok := calls[op]; !ok {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	for _, op := range missing {
		t.Errorf("the OpenAPI has %s; the Go client has no call for it", op)
	}
	for op, call := range calls {
		re, ok := ops[op]
		if !ok {
			t.Errorf("the Go client calls %s, which the OpenAPI does not describe", op)
			continue
		}
		mu.Lock()
		seen = nil
		mu.Unlock()
		call(c, context.Background())
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		method, _, _ := strings.Cut(op, " ")
		if len(got) != 1 || !strings.HasPrefix(got[0], method+" ") || !re.MatchString(strings.TrimPrefix(got[0], method+" ")) {
			t.Errorf("the call for %s sent %v", op, got)
		}
	}
}

// TestClientCallsOnlyTheAPI: every path the client's sources spell
// (a literal beginning "/v1/" or "/metrics") begins an operation's path
// of docs/openapi.json: a call added without its operation described
// fails here, whether or not it is in calls.
func TestClientCallsOnlyTheAPI(t *testing.T) {
	ops := operations(t)
	var paths []string
	for op := range ops {
		_, p, _ := strings.Cut(op, " ")
		paths = append(paths, p)
	}
	files, _ := filepath.Glob("*.go")
	lit := regexp.MustCompile(`"(/v1/[^"]*|/metrics)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			s, _, _ := strings.Cut(m[1], "?")
			ok := false
			for _, p := range paths {
				ok = ok || strings.HasPrefix(p, s)
			}
			if !ok {
				t.Errorf("%s spells %q, which begins no path of the OpenAPI", f, m[1])
			}
		}
	}
}
