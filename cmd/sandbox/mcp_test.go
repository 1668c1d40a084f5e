package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opensubstrate/sandbox/internal/errs"
)

// mcpSession starts `sandbox mcp` over stdio, as an MCP client would,
// and connects the SDK's client to it.
func mcpSession(t *testing.T, home string, args ...string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cmd := cliCmd(t, home, nil, append([]string{"mcp"}, args...)...)
	cs, err := c.Connect(context.Background(), &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls tool with args; it returns the structured result.
func call(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any) (map[string]any, error) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, err
	}
	if res.IsError {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return nil, errors.New("tool error: " + b.String())
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return m, nil
}

// rpcCode is err's JSON-RPC code, 0 when it is not a JSON-RPC error.
func rpcCode(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}

// TestMCPAsAnAgentUsesIt: an MCP client (the official Go SDK's) starts
// `sandbox mcp`, lists its tools, makes a sandbox, writes, lists and
// reads a file, runs a command and gets its output and exit status,
// verifies the sealed run and reads its receipt, suspends, resumes and
// closes the sandbox; bad arguments and failures come back as JSON-RPC
// errors with the category's code.
func TestMCPAsAnAgentUsesIt(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	cs := mcpSession(t, home)
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "close_sandbox create_sandbox exec fork_sandbox list_files list_sandboxes read_file resume_sandbox show_receipt suspend_sandbox verify_run write_file" {
		t.Fatalf("tools: %s", got)
	}
	sb, err := call(t, cs, "create_sandbox", map[string]any{"grants": []string{"cpu:5J"}})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := sb["id"].(string)
	if !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: %v", sb)
	}
	if _, err := call(t, cs, "write_file", map[string]any{"sandbox": id, "path": "hello.txt", "content": "héllo\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, cs, "write_file", map[string]any{"sandbox": id, "path": "bin.dat", "content": "AAEC/w==", "encoding": "base64"}); err != nil {
		t.Fatal(err)
	}
	ls, err := call(t, cs, "list_files", map[string]any{"sandbox": id, "path": "."})
	if err != nil || !strings.Contains(mustJSON(ls), `"name":"hello.txt"`) {
		t.Fatalf("list: %v %v", ls, err)
	}
	if f, err := call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "hello.txt"}); err != nil || f["content"] != "héllo\n" || f["encoding"] != "utf-8" {
		t.Fatalf("read: %v %v", f, err)
	}
	if f, err := call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "bin.dat"}); err != nil || f["content"] != "AAEC/w==" || f["encoding"] != "base64" {
		t.Fatalf("read binary: %v %v", f, err)
	}
	x, err := call(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"sh", "-c", "cat hello.txt; echo oops >&2; exit 3"}})
	if err != nil || x["exit_status"] != 3.0 || x["stdout"] != "héllo\n" || x["stderr"] != "oops\n" || x["sealed"] != true {
		t.Fatalf("exec: %v %v", x, err)
	}
	run, _ := x["run"].(string)
	if v, err := call(t, cs, "verify_run", map[string]any{"run": run}); err != nil || v["verified"] != true {
		t.Fatalf("verify: %v %v", v, err)
	}
	if r, err := call(t, cs, "show_receipt", map[string]any{"run": run}); err != nil || !strings.Contains(mustJSON(r), `"class":"Cpu"`) {
		t.Fatalf("receipt: %v %v", r, err)
	}
	// Output beyond the bound is cut, and said to be.
	if x, err := call(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"sh", "-c", "head -c 1100000 /dev/zero | tr '\\0' a"}}); err != nil || x["stdout_truncated"] != true || len(x["stdout"].(string)) != 1<<20 {
		t.Fatalf("big output: truncated=%v len=%d %v", x["stdout_truncated"], len(x["stdout"].(string)), err)
	}
	// Bad arguments and failures: JSON-RPC errors with the category's code.
	for _, tc := range []struct {
		tool string
		args map[string]any
		cat  errs.Category
	}{
		{"exec", map[string]any{"sandbox": id, "command": []string{}}, errs.Invalid},
		{"exec", map[string]any{"sandbox": "sb-000000000000", "command": []string{"true"}}, errs.NotFound},
		{"read_file", map[string]any{"sandbox": id, "path": "/etc/shadow"}, errs.Denied},
		{"write_file", map[string]any{"sandbox": id, "path": "x", "content": "!", "encoding": "base64"}, errs.Invalid},
		{"write_file", map[string]any{"sandbox": id, "path": "/usr/x", "content": "x"}, errs.Denied},
		{"verify_run", map[string]any{"run": "not-a-run"}, errs.Invalid},
		{"verify_run", map[string]any{"run": "b3:" + strings.Repeat("0", 64)}, errs.NotFound},
		{"create_sandbox", map[string]any{"grants": []string{"fs:relative:rw"}}, errs.Invalid},
		{"fork_sandbox", map[string]any{"sandbox": id, "count": 0}, errs.Invalid},
		{"fork_sandbox", map[string]any{"sandbox": id, "count": 65}, errs.Invalid},
		{"fork_sandbox", map[string]any{"sandbox": "sb-000000000000", "count": 1}, errs.NotFound},
	} {
		_, err := call(t, cs, tc.tool, tc.args)
		if rpcCode(err) != int64(errs.MCPCode(tc.cat)) {
			t.Errorf("%s %v: %v (code %d), want %s (%d)", tc.tool, tc.args, err, rpcCode(err), tc.cat, errs.MCPCode(tc.cat))
		}
	}
	// Arguments that do not fit the tool's schema never reach it.
	if _, err := call(t, cs, "exec", map[string]any{"sandbox": id, "command": "ls"}); err == nil {
		t.Error("a string for command was taken")
	}
	if _, err := call(t, cs, "no_such_tool", nil); err == nil {
		t.Error("an unknown tool was called")
	}
	if f, err := call(t, cs, "fork_sandbox", map[string]any{"sandbox": id, "count": 2}); err != nil || len(f["children"].([]any)) != 2 || f["head"] == "" {
		t.Fatalf("fork: %v %v", f, err)
	} else {
		for _, c := range f["children"].([]any) {
			child := c.(map[string]any)
			if child["error"] != nil {
				t.Fatalf("child %v", child)
			}
			if x, err := call(t, cs, "exec", map[string]any{"sandbox": child["id"], "command": []string{"cat", "hello.txt"}}); err != nil || x["stdout"] != "héllo\n" {
				t.Fatalf("child %v: %v %v", child["id"], x, err)
			}
		}
	}
	if s, err := call(t, cs, "suspend_sandbox", map[string]any{"sandbox": id}); err != nil || s["root"] == "" {
		t.Fatalf("suspend: %v %v", s, err)
	}
	if _, err := call(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"true"}}); rpcCode(err) != int64(errs.MCPCode(errs.Invalid)) {
		t.Fatalf("exec while suspended: %v", err)
	}
	if _, err := call(t, cs, "resume_sandbox", map[string]any{"sandbox": id}); err != nil {
		t.Fatal(err)
	}
	if x, err := call(t, cs, "exec", map[string]any{"sandbox": id, "command": []string{"cat", "hello.txt"}}); err != nil || x["stdout"] != "héllo\n" {
		t.Fatalf("after resume: %v %v", x, err)
	}
	if _, err := call(t, cs, "close_sandbox", map[string]any{"sandbox": id}); err != nil {
		t.Fatal(err)
	}
	if l, err := call(t, cs, "list_sandboxes", nil); err != nil || strings.Contains(mustJSON(l), id) {
		t.Fatalf("after close: %v %v", l, err)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestMCPClientGoneMidExec: a client that disconnects while its exec
// runs leaves nothing running: the exec is interrupted and sealed.
func TestMCPClientGoneMidExec(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	// A client whose process dies: its pipes to the server just close.
	cmd := cliCmd(t, home, nil, "mcp")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &sdk.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := call(t, cs, "create_sandbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	id := sb["id"].(string)
	go cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox": id, "command": []string{"sleep", "307"}}})
	running := func() int {
		out, _, _ := runCLI(t, home, "", "ps", "--json")
		var l []struct {
			ID      string
			Running int
		}
		json.Unmarshal([]byte(out), &l)
		for _, s := range l {
			if s.ID == id {
				return s.Running
			}
		}
		return -1
	}
	for i := 0; running() != 1; i++ {
		if i > 200 {
			t.Fatal("the exec did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	stdin.Close() // the client goes away: its end of the stream closes
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("sandbox mcp did not end when its client went away")
	}
	deadline := time.Now().Add(20 * time.Second) // the exec's own deadline is a minute
	for running() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the exec still runs after its client went away")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := waitGone("sleep 307"); len(l) > 0 {
		t.Fatalf("left running: %v", l)
	}
	out, _, _ := runCLI(t, home, "", "records", "--json")
	if !strings.Contains(out, `"executed": 1`) {
		t.Fatalf("the interrupted exec was not sealed into the record:\n%s", out)
	}
}

// TestMCPClientCancelsMidExec: a client that cancels its call (MCP's
// notifications/cancelled) while the exec runs gets its answer at once,
// and the exec is interrupted and sealed, not left to its deadline.
func TestMCPClientCancelsMidExec(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	cs := mcpSession(t, home)
	sb, err := call(t, cs, "create_sandbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox": sb["id"], "command": []string{"sleep", "308"}}})
		done <- err
	}()
	for i := 0; len(processesWith("sleep 308")) == 0; i++ {
		if i > 400 {
			t.Fatal("the exec did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	if l := waitGone("sleep 308"); len(l) > 0 {
		t.Fatalf("left running: %v", l)
	}
	// Sealed into the sandbox's record, as interrupted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := runCLI(t, home, "", "records", "--json")
		if strings.Contains(out, `"executed": 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not sealed:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMCPOverStreamableHTTP: `sandbox mcp --http` serves the same tools
// on a loopback address to clients with a token, and to no others.
func TestMCPOverStreamableHTTP(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	tok := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tok, []byte("# agents\nabcdefghijklmnopqrstuvwxyz\n"), 0o600)
	if _, e, code := runCLI(t, home, "", "mcp", "--http", "0.0.0.0:0", "--token-file", tok); code != 2 || !strings.Contains(e, "loopback") {
		t.Fatalf("a public address: %d %s", code, e)
	}
	if _, e, code := runCLI(t, home, "", "mcp", "--http", "127.0.0.1:0"); code != 2 || !strings.Contains(e, "--token-file") {
		t.Fatalf("no tokens: %d %s", code, e)
	}
	cmd := cliCmd(t, home, nil, "mcp", "--http", "127.0.0.1:0", "--token-file", tok)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var url string
	for sc.Scan() {
		if m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	if url == "" {
		t.Fatal("no URL")
	}
	connect := func(token string) (*sdk.ClientSession, error) {
		hc := &http.Client{Transport: headerRT{token}}
		return sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	}
	if _, err := connect("wrong-token-wrong-token"); err == nil {
		t.Fatal("connected with a wrong token")
	}
	cs, err := connect("abcdefghijklmnopqrstuvwxyz")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	sb, err := call(t, cs, "create_sandbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := call(t, cs, "exec", map[string]any{"sandbox": sb["id"], "command": []string{"echo", "over http"}}); err != nil || x["stdout"] != "over http\n" {
		t.Fatalf("%v %v", x, err)
	}
}

type headerRT struct{ token string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPWithAnIndependentClient: the reference TypeScript SDK's client
// (from the npm registry) drives `sandbox mcp` over stdio: it lists the
// tools, makes a sandbox, runs a command, and a bad argument is an error.
func TestMCPWithAnIndependentClient(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	dir := npmPackage(t, "@modelcontextprotocol/sdk@1.32.2")
	home := t.TempDir()
	startServe(t, home)
	// Beside its node_modules, where an ES module resolves its imports.
	b, err := os.ReadFile(filepath.Join("testdata", "mcp-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "mcp-client.mjs")
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", script, os.Args[0], home)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	for _, want := range []string{"tools: close_sandbox,create_sandbox,exec,", "exec: 0 from node\n", "bad: -32602"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("want %q in:\n%s", want, out)
		}
	}
}

// npmPackage installs spec (name@version) once into a cache directory
// and returns it.
func npmPackage(t *testing.T, spec string) string {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed (scripts/deps installs it)")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sandbox-test", "npm", strings.NewReplacer("@", "_", "/", "_").Replace(spec))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
		return dir
	}
	os.MkdirAll(dir, 0o755)
	cmd := exec.Command("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel=error", spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", spec, err, out)
	}
	return dir
}

// The model cannot grant itself the host through MCP (issue 26): a
// connection is held to its policy (the Default without --policy), which
// the tools' arguments cannot widen; nor can it act in a sandbox whose
// grants it could not have given.
func TestMCPModelCannotGrantTheHost(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("S1 sandboxes need root here")
	}
	home := t.TempDir()
	startServe(t, home)
	hostDir := t.TempDir()
	os.WriteFile(filepath.Join(hostDir, "f"), []byte("host\n"), 0o644)
	cs := mcpSession(t, home)
	denied := int64(errs.MCPCode(errs.Denied))
	if _, err := call(t, cs, "create_sandbox", map[string]any{"grants": []string{"fs:" + hostDir + ":rw"}}); rpcCode(err) != denied || !strings.Contains(err.Error(), "fs:"+hostDir+":rw") {
		t.Fatalf("create_sandbox with a host directory: %v", err)
	}
	if _, err := call(t, cs, "create_sandbox", map[string]any{"grants": []string{"net:example.com:443"}}); rpcCode(err) != denied {
		t.Fatalf("create_sandbox with the network: %v", err)
	}
	// The operator's sandbox, made with the host directory: the model
	// sees it (the connection acts as the service's user), but may not
	// act through what it holds.
	out, e, code := runCLI(t, home, "", "create", "--grant", "fs:"+hostDir+":rw")
	if code != 0 {
		t.Fatalf("create: %d %s", code, e)
	}
	wide := strings.TrimSpace(out)
	if _, err := call(t, cs, "write_file", map[string]any{"sandbox": wide, "path": hostDir + "/planted", "content": "x"}); rpcCode(err) != denied {
		t.Fatalf("write_file into the operator's grant: %v", err)
	}
	if _, err := call(t, cs, "exec", map[string]any{"sandbox": wide, "command": []string{"sh", "-c", "echo x > " + hostDir + "/planted"}}); rpcCode(err) != denied {
		t.Fatalf("exec in the operator's sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "planted")); err == nil {
		t.Fatal("the model wrote a host file")
	}
	// Its own sandbox works as before.
	if _, err := call(t, cs, "create_sandbox", map[string]any{"grants": []string{"cpu:5J"}}); err != nil {
		t.Fatal(err)
	}
	// A connection the operator gave the directory read-only.
	pol := filepath.Join(t.TempDir(), "agent.json")
	os.WriteFile(pol, []byte(`{"paths":[{"root":"`+hostDir+`","mode":"ro"}]}`), 0o600)
	ro := mcpSession(t, home, "--policy", pol)
	sb, err := call(t, ro, "create_sandbox", map[string]any{"grants": []string{"fs:" + hostDir + ":ro"}})
	if err != nil {
		t.Fatalf("a grant its policy gives: %v", err)
	}
	if x, err := call(t, ro, "exec", map[string]any{"sandbox": sb["id"], "command": []string{"cat", hostDir + "/f"}}); err != nil || x["stdout"] != "host\n" {
		t.Fatalf("reading the granted directory: %v %v", x, err)
	}
	if _, err := call(t, ro, "create_sandbox", map[string]any{"grants": []string{"fs:" + hostDir + ":rw"}}); rpcCode(err) != denied {
		t.Fatalf("read-write beyond its policy: %v", err)
	}
	if out, _, code := runCLI(t, home, "", "policy", "log"); code != 0 || !strings.Contains(out, "fs:"+hostDir+":rw") || !strings.Contains(out, "paths") {
		t.Fatalf("the decision log: %d %s", code, out)
	}
	// A policy that does not parse: a usage error, before anything.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"paths":"/"}`), 0o600)
	if _, e, code := runCLI(t, home, "", "mcp", "--policy", bad); code != 2 || !strings.Contains(e, "--policy") {
		t.Fatalf("a bad policy: %d %s", code, e)
	}
}
