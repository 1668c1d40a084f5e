package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opensubstrate/sandbox/client"
	"github.com/opensubstrate/sandbox/internal/errs"
)

// Bounds of what a tool returns.
const (
	MaxOutput = 1 << 20 // bytes of each of an exec's streams
	MaxFile   = 4 << 20 // bytes of a file read or written
)

// Options configure the MCP server.
type Options struct {
	// JCP, when set, is the agent's JCP principal: every exec is
	// presented with its chain (a fresh invocation each), and the tools
	// jcp_budget, jcp_delegate and jcp_checkpoint are added. No tool
	// amends or revokes a grant.
	JCP Principal
}

// New is the MCP server whose tools call api. A call the client
// cancels, or whose client goes away, is cancelled: an exec is
// interrupted and sealed.
func New(api *client.Client, version string, o Options) *sdk.Server {
	instr := "Each sandbox is isolated (S1: native programs under namespaces, Landlock and seccomp; S2: WebAssembly) " +
		"and touches only what it was granted. Every exec is sealed as a run with a signed receipt of its energy: " +
		"verify_run checks one. Idle sandboxes are parked, never erased."
	if o.JCP != nil {
		instr += " Every exec spends from your JCP grant: the service decides it before it runs and refuses it (denied, with its code) " +
			"when your grant does not allow it or its budget is spent. jcp_budget shows what is left; jcp_delegate passes a narrower part " +
			"of your grant to another principal; jcp_checkpoint records where a run is. Your grant's issuer, not you, may amend or revoke it."
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "sandbox", Title: "sandbox: isolated, metered, attested runs", Version: version}, &sdk.ServerOptions{
		Instructions: instr,
	})
	t := &tools{api: api, jcp: o.JCP}
	sdk.AddTool(s, &sdk.Tool{Name: "create_sandbox", Description: "Create a live sandbox with a fresh workspace (its working directory). Grants use the CLI's syntax: fs:/path:ro, net:host:443, cpu:5J, …; nothing else is reachable."}, t.create)
	sdk.AddTool(s, &sdk.Tool{Name: "list_sandboxes", Description: "List your sandboxes, live and suspended."}, t.list)
	sdk.AddTool(s, &sdk.Tool{Name: "exec", Description: fmt.Sprintf("Run a command in a live sandbox and return its exit status and output (each stream cut at %d bytes, said when cut). The run is sealed: its id verifies with verify_run.", MaxOutput)}, t.exec)
	sdk.AddTool(s, &sdk.Tool{Name: "read_file", Description: fmt.Sprintf("Read a file of a live sandbox (at most %d bytes); text comes back as UTF-8, anything else as base64.", MaxFile)}, t.read)
	sdk.AddTool(s, &sdk.Tool{Name: "write_file", Description: "Write a file into a live sandbox, under a read-write grant (its workspace is one)."}, t.write)
	sdk.AddTool(s, &sdk.Tool{Name: "list_files", Description: "List a directory of a live sandbox."}, t.ls)
	sdk.AddTool(s, &sdk.Tool{Name: "suspend_sandbox", Description: "Suspend a live sandbox: its workspace is kept by content address and its run record says so; resume_sandbox starts it again."}, t.suspend)
	sdk.AddTool(s, &sdk.Tool{Name: "fork_sandbox", Description: fmt.Sprintf("Make count (1 to %d) sandboxes from a sandbox's state: each a new sandbox of yours with its workspace as the sandbox's is now, and its own run record citing the sandbox's; the sandbox runs on (a suspended one stays suspended). Every child is listed, with its sandbox or why it was not made.", client.MaxFork)}, t.fork)
	sdk.AddTool(s, &sdk.Tool{Name: "resume_sandbox", Description: "Resume a suspended sandbox from its run record (its workspace checked by address)."}, t.resume)
	sdk.AddTool(s, &sdk.Tool{Name: "close_sandbox", Description: "Close a sandbox (live or suspended): its run record ends; the record and what it names stay."}, t.close)
	sdk.AddTool(s, &sdk.Tool{Name: "verify_run", Description: "Verify a sealed run (b3:…) against the service's key: every record it signed, and whether any failed."}, t.verify)
	sdk.AddTool(s, &sdk.Tool{Name: "show_receipt", Description: "Show a sealed run's energy receipt: joules per device class, measured and estimated, with each figure's provenance."}, t.receipt)
	if o.JCP != nil {
		addJCP(s, t)
	}
	return s
}

type tools struct {
	api *client.Client
	jcp Principal // nil: no JCP grant
}

// toolErr is err as a JSON-RPC error with its category's code.
func toolErr(err error) error {
	cat := errs.Internal
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		cat, _ = errs.Parse(ae.Category)
	case errors.Is(err, context.Canceled):
		cat = errs.Canceled
	default:
		cat = errs.Of(err)
	}
	d := map[string]string{"category": cat.String()}
	if ae != nil && ae.Code != "" {
		d["code"] = ae.Code
	}
	data, _ := json.Marshal(d)
	return &jsonrpc.Error{Code: int64(errs.MCPCode(cat)), Message: err.Error(), Data: data}
}

func invalid(f string, a ...any) error {
	return toolErr(errs.Usage{Err: fmt.Errorf(f, a...)})
}

// Sandbox names a sandbox.
type Sandbox struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id (sb-…)"`
}

func (s Sandbox) check() error {
	if s.Sandbox == "" {
		return invalid("\"sandbox\" is required")
	}
	return nil
}

// CreateIn is create_sandbox's input.
type CreateIn struct {
	Tier   string            `json:"tier,omitempty" jsonschema:"S1 (native programs; the default), S2 (WebAssembly modules) or S5 (native programs in a microVM of its own)"`
	Grants []string          `json:"grants,omitempty" jsonschema:"grants in the CLI's syntax: fs:/path:ro, net:example.com:443, cpu:5J"`
	Env    map[string]string `json:"env,omitempty" jsonschema:"environment of every exec"`
	Image  string            `json:"image,omitempty" jsonschema:"an imported image whose root filesystem S1 programs run in"`
}

func (t *tools) create(ctx context.Context, _ *sdk.CallToolRequest, in CreateIn) (*sdk.CallToolResult, *client.Sandbox, error) {
	sb, err := t.api.Create(ctx, client.SandboxSpec{Tier: in.Tier, Grants: in.Grants, Env: in.Env, Image: in.Image})
	if err != nil {
		return nil, nil, toolErr(err)
	}
	return nil, sb, nil
}

// ListOut is list_sandboxes' output.
type ListOut struct {
	Sandboxes []client.Sandbox `json:"sandboxes"`
}

func (t *tools) list(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, ListOut, error) {
	l, err := t.api.List(ctx)
	if err != nil {
		return nil, ListOut{}, toolErr(err)
	}
	return nil, ListOut{Sandboxes: append([]client.Sandbox{}, l...)}, nil
}

// ExecIn is exec's input.
type ExecIn struct {
	Sandbox   string            `json:"sandbox" jsonschema:"the sandbox's id (sb-…)"`
	Command   []string          `json:"command" jsonschema:"the program and its arguments, e.g. [\"sh\", \"-c\", \"ls -l\"]"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment added for this command"`
	Dir       string            `json:"dir,omitempty" jsonschema:"working directory (default: the workspace)"`
	Stdin     string            `json:"stdin,omitempty" jsonschema:"given to the command on its standard input"`
	TimeoutMS int64             `json:"timeout_ms,omitempty" jsonschema:"wall-clock limit in milliseconds (default: one minute)"`
}

// ExecOut is exec's output.
type ExecOut struct {
	ExitStatus      int    `json:"exit_status"`
	ExitStatusFrom  string `json:"exit_status_from" jsonschema:"guest: the command's own status; sandbox: a limit, a refusal or an interrupt"`
	Status          string `json:"status" jsonschema:"how it ended: exited, deadline, killed, …"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	Run             string `json:"run,omitempty" jsonschema:"the sealed run (verify_run, show_receipt)"`
	Sealed          bool   `json:"sealed"`
	Detail          string `json:"detail,omitempty"`
}

// capped keeps the first n bytes written to it and counts the rest.
type capped struct {
	buf bytes.Buffer
	n   int
	cut bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p) // all taken: the rest is counted as cut, not refused
	room := c.n - c.buf.Len()
	if len(p) > room {
		c.cut = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
	return n, nil
}

func (t *tools) exec(ctx context.Context, _ *sdk.CallToolRequest, in ExecIn) (*sdk.CallToolResult, ExecOut, error) {
	if err := (Sandbox{in.Sandbox}).check(); err != nil {
		return nil, ExecOut{}, err
	}
	if len(in.Command) == 0 || in.Command[0] == "" {
		return nil, ExecOut{}, invalid("\"command\" needs at least the program")
	}
	if in.TimeoutMS < 0 {
		return nil, ExecOut{}, invalid("\"timeout_ms\" is a number of milliseconds, 0 (the default) or more")
	}
	stdout, stderr := &capped{n: MaxOutput}, &capped{n: MaxOutput}
	x := client.ExecSpec{Args: in.Command, Env: in.Env, Dir: in.Dir, DeadlineMS: in.TimeoutMS}
	if in.Stdin != "" {
		x.Stdin = []byte(in.Stdin)
	}
	if t.jcp != nil {
		p, err := t.jcp.Present()
		if err != nil {
			return nil, ExecOut{}, toolErr(err)
		}
		x.JCP = p
	}
	r, err := t.api.Exec(ctx, in.Sandbox, x, stdout, stderr)
	if err != nil && r == nil {
		return nil, ExecOut{}, toolErr(err)
	}
	out := ExecOut{ExitStatus: r.ExitStatus, ExitStatusFrom: r.ExitFrom, Run: r.Run, Sealed: r.Sealed,
		Stdout: text(stdout.buf.Bytes()), Stderr: text(stderr.buf.Bytes()), StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut, Detail: r.Error}
	if r.Outcome != nil {
		out.Status = r.Outcome.Status
		if out.Detail == "" {
			out.Detail = r.Outcome.Detail
		}
	}
	return nil, out, nil
}

// text is b as a string, with bytes that are not UTF-8 replaced (an
// exec's output is for reading; its exact bytes are in the sealed run).
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
}
