package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opensubstrate/sandbox/client"
)

// PathIn names a path of a sandbox.
type PathIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id (sb-…)"`
	Path    string `json:"path" jsonschema:"an absolute path, or one relative to the workspace"`
}

func (p PathIn) check() error {
	if err := (Sandbox{p.Sandbox}).check(); err != nil {
		return err
	}
	if p.Path == "" {
		return invalid("\"path\" is required")
	}
	return nil
}

// resolve is p's path as the service takes it: absolute, a relative one
// under the sandbox's workspace. What it may reach is the service's to
// decide (its grants).
func (t *tools) resolve(ctx context.Context, p PathIn) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	if path.IsAbs(p.Path) {
		return path.Clean(p.Path), nil
	}
	sb, err := t.api.Get(ctx, p.Sandbox)
	if err != nil {
		return "", toolErr(err)
	}
	if sb.Workspace == "" {
		return "", invalid("sandbox %s has no workspace: give an absolute path", p.Sandbox)
	}
	return path.Join(sb.Workspace, p.Path), nil
}

// FileOut is read_file's output.
type FileOut struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding" jsonschema:"utf-8, or base64 for bytes that are not UTF-8 text"`
	Content  string `json:"content"`
}

// errTooLarge stops a download past MaxFile.
var errTooLarge = errors.New("too large")

type limited struct {
	buf bytes.Buffer
	n   int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.buf.Len()+len(p) > l.n {
		return 0, errTooLarge
	}
	return l.buf.Write(p)
}

func (t *tools) read(ctx context.Context, _ *sdk.CallToolRequest, in PathIn) (*sdk.CallToolResult, FileOut, error) {
	p, err := t.resolve(ctx, in)
	if err != nil {
		return nil, FileOut{}, err
	}
	l := &limited{n: MaxFile}
	n, err := t.api.Download(ctx, in.Sandbox, p, l)
	if errors.Is(err, errTooLarge) {
		return nil, FileOut{}, toolErr(limitError{fmt.Sprintf("%s is larger than %d bytes: read it in parts with exec (head -c, tail -c)", in.Path, MaxFile)})
	}
	if err != nil {
		return nil, FileOut{}, toolErr(err)
	}
	out := FileOut{Path: in.Path, Size: n, Encoding: "utf-8", Content: l.buf.String()}
	if !utf8.Valid(l.buf.Bytes()) {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(l.buf.Bytes())
	}
	return nil, out, nil
}

// limitError is over a bound of these tools.
type limitError struct{ msg string }

func (e limitError) Error() string { return e.msg }
func (limitError) Limit() bool     { return true }

// WriteIn is write_file's input.
type WriteIn struct {
	Sandbox  string `json:"sandbox" jsonschema:"the sandbox's id (sb-…)"`
	Path     string `json:"path" jsonschema:"an absolute path, or one relative to the workspace, under a read-write grant"`
	Content  string `json:"content" jsonschema:"the file's content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal (default 0644)"`
}

// WriteOut is write_file's output.
type WriteOut struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

func (t *tools) write(ctx context.Context, _ *sdk.CallToolRequest, in WriteIn) (*sdk.CallToolResult, WriteOut, error) {
	p, err := t.resolve(ctx, PathIn{in.Sandbox, in.Path})
	if err != nil {
		return nil, WriteOut{}, err
	}
	b := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		if b, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, WriteOut{}, invalid("\"content\" is not base64: %v", err)
		}
	default:
		return nil, WriteOut{}, invalid("\"encoding\" %q: utf-8 or base64", in.Encoding)
	}
	if len(b) > MaxFile {
		return nil, WriteOut{}, toolErr(limitError{fmt.Sprintf("%d bytes, more than %d", len(b), MaxFile)})
	}
	mode := os.FileMode(0o644)
	if in.Mode != "" {
		m, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || m > 0o777 {
			return nil, WriteOut{}, invalid("\"mode\" %q: permission bits in octal, e.g. 0644", in.Mode)
		}
		mode = os.FileMode(m)
	}
	n, err := t.api.Upload(ctx, in.Sandbox, p, bytes.NewReader(b), mode)
	if err != nil {
		return nil, WriteOut{}, toolErr(err)
	}
	return nil, WriteOut{Path: in.Path, Bytes: n}, nil
}

// ListFilesOut is list_files' output.
type ListFilesOut struct {
	Path    string            `json:"path"`
	Entries []client.FileInfo `json:"entries"`
}

func (t *tools) ls(ctx context.Context, _ *sdk.CallToolRequest, in PathIn) (*sdk.CallToolResult, ListFilesOut, error) {
	p, err := t.resolve(ctx, in)
	if err != nil {
		return nil, ListFilesOut{}, err
	}
	l, err := t.api.ListFiles(ctx, in.Sandbox, p)
	if err != nil {
		return nil, ListFilesOut{}, toolErr(err)
	}
	return nil, ListFilesOut{Path: in.Path, Entries: append([]client.FileInfo{}, l...)}, nil
}

func (t *tools) suspend(ctx context.Context, _ *sdk.CallToolRequest, in Sandbox) (*sdk.CallToolResult, *client.Snapshot, error) {
	if err := in.check(); err != nil {
		return nil, nil, err
	}
	s, err := t.api.Suspend(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, toolErr(err)
	}
	return nil, s, nil
}

// ForkIn is fork_sandbox's input.
type ForkIn struct {
	Sandbox   string `json:"sandbox" jsonschema:"the sandbox's id (sb-…), live or suspended"`
	Count     int    `json:"count" jsonschema:"how many sandboxes to make, 1 to 64"`
	Suspended bool   `json:"suspended,omitempty" jsonschema:"leave them suspended: each starts when resume_sandbox is called"`
}

func (t *tools) fork(ctx context.Context, _ *sdk.CallToolRequest, in ForkIn) (*sdk.CallToolResult, *client.Forked, error) {
	if err := (Sandbox{in.Sandbox}).check(); err != nil {
		return nil, nil, err
	}
	if in.Count < 1 || in.Count > client.MaxFork {
		return nil, nil, invalid("\"count\": %d: a fork makes 1 to %d sandboxes", in.Count, client.MaxFork)
	}
	f, err := t.api.Fork(ctx, in.Sandbox, client.ForkSpec{Count: in.Count, Suspended: in.Suspended})
	if err != nil {
		return nil, nil, toolErr(err)
	}
	return nil, f, nil
}

func (t *tools) resume(ctx context.Context, _ *sdk.CallToolRequest, in Sandbox) (*sdk.CallToolResult, *client.Sandbox, error) {
	if err := in.check(); err != nil {
		return nil, nil, err
	}
	s, err := t.api.Resume(ctx, in.Sandbox)
	if err != nil {
		return nil, nil, toolErr(err)
	}
	return nil, s, nil
}

// Closed is close_sandbox's output.
type Closed struct {
	Sandbox string `json:"sandbox"`
	Closed  bool   `json:"closed"`
}

func (t *tools) close(ctx context.Context, _ *sdk.CallToolRequest, in Sandbox) (*sdk.CallToolResult, Closed, error) {
	if err := in.check(); err != nil {
		return nil, Closed{}, err
	}
	if err := t.api.CloseRecord(ctx, in.Sandbox); err != nil {
		return nil, Closed{}, toolErr(err)
	}
	return nil, Closed{Sandbox: in.Sandbox, Closed: true}, nil
}

// RunIn names a sealed run.
type RunIn struct {
	Run string `json:"run" jsonschema:"the run's address (b3:…), as exec returned it"`
}

func (t *tools) report(ctx context.Context, in RunIn) (*client.RunReport, error) {
	if in.Run == "" {
		return nil, invalid("\"run\" is required")
	}
	r, err := t.api.RunReport(ctx, in.Run)
	if err != nil {
		return nil, toolErr(err)
	}
	return r, nil
}

// VerifyOut is verify_run's output.
type VerifyOut struct {
	Run      string          `json:"run"`
	Verified bool            `json:"verified" jsonschema:"every record of the run checks out against the service's key"`
	Problems []string        `json:"problems,omitempty"`
	Signer   string          `json:"signer,omitempty"`
	Unit     string          `json:"unit,omitempty"`
	Outcome  *client.Outcome `json:"outcome,omitempty"`
}

func (t *tools) verify(ctx context.Context, _ *sdk.CallToolRequest, in RunIn) (*sdk.CallToolResult, VerifyOut, error) {
	r, err := t.report(ctx, in)
	if err != nil {
		return nil, VerifyOut{}, err
	}
	return nil, VerifyOut{Run: r.Run, Verified: r.Verified, Problems: r.Problems, Signer: r.Signer, Unit: r.Unit, Outcome: r.Outcome}, nil
}

// ReceiptOut is show_receipt's output.
type ReceiptOut struct {
	Run      string          `json:"run"`
	Verified bool            `json:"verified"`
	Started  string          `json:"started,omitempty"`
	Ended    string          `json:"ended,omitempty"`
	Energy   []client.Energy `json:"energy" jsonschema:"per device class: measured and estimated microjoules, each with its provenance"`
}

func (t *tools) receipt(ctx context.Context, _ *sdk.CallToolRequest, in RunIn) (*sdk.CallToolResult, ReceiptOut, error) {
	r, err := t.report(ctx, in)
	if err != nil {
		return nil, ReceiptOut{}, err
	}
	return nil, ReceiptOut{Run: r.Run, Verified: r.Verified, Started: r.Started, Ended: r.Ended, Energy: append([]client.Energy{}, r.Energy...)}, nil
}
