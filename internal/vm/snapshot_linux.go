package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
)

// Snapshot pauses the VM and writes its whole state (memory and devices)
// to path through QEMU's migration stream; the VM stays paused (Kill it,
// or Continue). The guest's root is in its memory, so the image is the
// guest's disk too; granted directories are the host's and are kept by
// whoever keeps the workspace.
func (m *Machine) Snapshot(ctx context.Context, path string) (*executor.Snapshot, error) {
	sock := filepath.Join(m.spec.Dir, "out.sock")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			os.Remove(path)
		}
	}()
	type result struct {
		a   addr.Addr
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		h := addr.NewHasher()
		n, err := io.Copy(io.MultiWriter(f, h), c)
		got <- result{h.Sum(), n, err}
	}()
	if _, err := m.qmp(ctx, map[string]any{"execute": "stop"},
		map[string]any{"execute": "migrate", "arguments": map[string]any{"uri": "unix:" + sock}}); err != nil {
		return nil, err
	}
	if err := m.waitMigration(ctx, "query-migrate"); err != nil {
		return nil, err
	}
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if r.err != nil {
		return nil, fmt.Errorf("vm: writing the memory image: %w", r.err)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	ok = true
	return &executor.Snapshot{Path: path, Addr: r.a, Size: r.n}, nil
}

// waitMigration polls until the migration completes, failing on its
// failure.
func (m *Machine) waitMigration(ctx context.Context, query string) error {
	for {
		out, err := m.qmp(ctx, map[string]any{"execute": query})
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		json.Unmarshal(out[0], &st)
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("vm: migration %s: %s", st.Status, st.Error)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-m.exited:
			return m.ended(nil)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// incoming feeds a memory image to a QEMU started with -incoming defer,
// checking it against want (unless zero) as it goes, and lets the guest
// run on.
func (m *Machine) incoming(ctx context.Context, path string) error {
	sock := filepath.Join(m.spec.Dir, "in.sock")
	os.Remove(sock)
	if _, err := m.qmp(ctx, map[string]any{"execute": "migrate-incoming", "arguments": map[string]any{"uri": "unix:" + sock}}); err != nil {
		return err
	}
	c, err := m.dial(ctx, "in.sock")
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		c.Close()
		return err
	}
	_, err = io.Copy(c, f)
	f.Close()
	c.Close()
	if err != nil {
		return fmt.Errorf("vm: sending the memory image: %w", err)
	}
	for {
		out, err := m.qmp(ctx, map[string]any{"execute": "query-status"})
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		json.Unmarshal(out[0], &st)
		switch st.Status {
		case "paused", "postmigrate", "prelaunch":
			if st.Status == "paused" {
				return m.resume(ctx)
			}
		case "running":
			return nil
		case "inmigrate":
		default:
			return fmt.Errorf("vm: resuming from the memory image: the VM is %s", st.Status)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-m.exited:
			return m.ended(nil)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
