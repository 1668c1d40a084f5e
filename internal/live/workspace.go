package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/tree"
	"github.com/opensubstrate/sandbox/internal/volume"
)

// DefaultWorkspaceMax is the size bound a live sandbox's workspace gets
// by default (Host.WorkspaceMax, SandboxSpec.Limits.WorkspaceBytes).
const DefaultWorkspaceMax = 10 << 30

// workspaceBound is the bound a sandbox's workspace gets, in bytes (0:
// none): its spec's where it sets one (negative: none), else the host's
// (Host.WorkspaceMax: negative, none; 0, DefaultWorkspaceMax). Only the
// default gives way where this host cannot make a bounded workspace (not
// root, no loop device): then there is none, and why is the note
// returned, which each exec's attestation carries. A bound that was
// asked for is never dropped: makeWorkspace refuses it.
func (h *Manager) workspaceBound(spec int64) (int64, string) {
	switch {
	case spec > 0:
		return spec, ""
	case spec < 0:
		return 0, ""
	case h.WorkspaceMax > 0:
		return h.WorkspaceMax, ""
	case h.WorkspaceMax < 0:
		return 0, ""
	}
	if err := volume.Probe(); err != nil {
		return 0, fmt.Sprintf("the sandbox's workspace has no size bound: this host cannot make one (%v)", err)
	}
	return DefaultWorkspaceMax, ""
}

// volumes is where workspaces are made (Volumes).
func (h *Manager) volumes() string {
	if h.Volumes != "" {
		return h.Volumes
	}
	return os.TempDir()
}

// volumeDirs are where workspaces of this or an ended process may be:
// Volumes, the system's temporary directory, and the pool a service
// makes there (volume.PoolDir) where one is.
func (h *Manager) volumeDirs() []string {
	ds := []string{os.TempDir()}
	for _, d := range []string{volume.PoolDir(), h.volumes()} {
		if !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	return ds
}

// UsePool makes bounded workspaces in a pool of size bytes (0: what is
// free under it, less a reserve) at dir (volume.PoolDir where ""), made
// or mounted again as volume.Pool does, where the directory they would
// be made in cannot share extents; where it can, they stay there and no
// pool is made. It says where they are made.
func (h *Manager) UsePool(dir string, size int64) (string, error) {
	if dir == "" {
		dir = volume.PoolDir()
	}
	if volume.Reflinks(h.volumes()) == nil {
		return h.volumes(), nil
	}
	if err := volume.Pool(dir, size); err != nil {
		return "", err
	}
	h.Volumes = dir
	return dir, nil
}

// WorkspaceBoundError is a workspace whose bound cannot be given: this
// host cannot make a bounded filesystem (Unavailable), or the bound is
// one no workspace can have (Invalid).
type WorkspaceBoundError struct {
	Bound int64
	Err   error
}

func (e *WorkspaceBoundError) Error() string {
	if errors.Is(e.Err, volume.ErrNotSupported) {
		return fmt.Sprintf("a workspace bound of %d bytes cannot be enforced on this host: %v (serve --workspace-max 0 makes workspaces without a bound)", e.Bound, e.Err)
	}
	return fmt.Sprintf("a workspace bound of %d bytes: %v", e.Bound, e.Err)
}

func (e *WorkspaceBoundError) Unwrap() error { return e.Err }

// Unavailable: this host cannot make a bounded workspace.
func (e *WorkspaceBoundError) Unavailable() bool { return errors.Is(e.Err, volume.ErrNotSupported) }

// Invalid: a bound no workspace can have.
func (e *WorkspaceBoundError) Invalid() bool { return e.Bound < volume.MinSize }

// makeWorkspace makes a live sandbox's workspace: a directory of its
// own, which, with a bound, is the mount point of a filesystem of that
// size (internal/volume), made in Volumes: a writer past it gets ENOSPC
// as it writes, whichever tier writes it (S1's bind, S2's host calls,
// S5's 9p share). Without a bound it is made in the system's temporary
// directory.
func (h *Manager) makeWorkspace(bound int64) (string, error) {
	if bound > 0 && bound < volume.MinSize {
		return "", &WorkspaceBoundError{Bound: bound, Err: fmt.Errorf("under %d bytes, the least a workspace is made with", volume.MinSize)}
	}
	// An unbounded workspace is no volume a fork could share: it stays
	// in the temporary directory, out of the pool the volumes share.
	dir := os.TempDir()
	if bound > 0 {
		dir = h.volumes()
	}
	ws, err := state.MkdirNamed(dir, "sandbox-ws", h.Store.Namer())
	if err != nil {
		return "", err
	}
	if bound > 0 {
		if err := volume.Make(ws, bound); err != nil {
			os.Remove(ws)
			return "", &WorkspaceBoundError{Bound: bound, Err: err}
		}
	}
	return ws, nil
}

// forkImage is a copy of a forked sandbox's workspace volume, made at the
// moment its state was taken (volume.Snapshot), for its children: the
// tree of that state, and the image.
type forkImage struct {
	root  addr.Addr
	path  string
	known []tree.Known // what the capture of that state read
}

// makeWorkspaceFrom makes sandbox id's workspace a copy of fi's image
// sharing its extents (volume.MakeFrom), where the image's size is the
// bound, and checks that it holds the fork's snapshot: captured, with
// what the parent's capture read (the same files, on a copy of its
// filesystem), it must give the snapshot's tree, or it is removed. It
// returns "" and why where it cannot (the caller makes one and restores
// it from the snapshot's chunks).
func (h *Manager) makeWorkspaceFrom(id string, fi forkImage, bound int64) (string, error) {
	if st, err := os.Stat(fi.path); err != nil || st.Size() != bound {
		return "", fmt.Errorf("the fork's workspace image is not of the bound %d: %v", bound, err)
	}
	ws, err := state.MkdirNamed(h.volumes(), "sandbox-ws", h.Store.Namer())
	if err != nil {
		return "", err
	}
	if err := volume.MakeFrom(ws, fi.path); err != nil {
		os.Remove(ws)
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil {
		removeWorkspace(ws)
		return "", err
	}
	ks := make([]tree.Known, len(fi.known))
	for i, k := range fi.known {
		k.Dev = uint64(st.Dev) // the same inode on the copy's device
		ks[i] = k
	}
	c := &tree.Capturer{Blobs: h.Store}
	c.Seed(ks)
	root, cst, err := c.Capture(ws)
	if err == nil && root != fi.root {
		err = fmt.Errorf("the copy holds tree %s, not the fork's snapshot %s (written to between its capture and its copy)", root, fi.root)
	}
	if err == nil && len(cst.Skipped) > 0 {
		err = fmt.Errorf("the copy holds special files a tree does not (%v)", cst.Skipped)
	}
	if err == nil {
		err = outsideTree(ws)
	}
	if err != nil {
		removeWorkspace(ws)
		return "", err
	}
	h.keepKnown(id, cst.Known)
	return ws, nil
}

// outsideTree says what of workspace ws a tree does not hold, if
// anything: a file with another name (a hard link), extended attributes
// (ACLs among them), set-id or sticky bits. A child restored from the
// tree would have none of it, so a copy that has any is not its
// snapshot, whatever its tree says.
func outsideTree(ws string) error {
	return filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink > 1:
			return fmt.Errorf("%s has %d names (hard links): a tree holds each file once", p, st.Nlink)
		case st.Mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) != 0 && p != ws:
			return fmt.Errorf("%s has set-id or sticky bits: a tree holds permissions only", p)
		}
		if n, err := unix.Llistxattr(p, nil); err == nil && n > 0 {
			return fmt.Errorf("%s has extended attributes: a tree holds none", p)
		}
		return nil
	})
}

// removeWorkspace removes a workspace and its filesystem.
func removeWorkspace(ws string) error {
	return errors.Join(volume.Release(ws), os.RemoveAll(ws))
}

// workspaceNotes say, for an exec's attestation, that its sandbox's
// workspace is at its bound as the exec ends (a writer gets ENOSPC), as
// its filesystem reports it.
func workspaceNotes(ws string) []string {
	if ws == "" {
		return nil
	}
	u, ok, err := volume.Of(ws)
	if err != nil || !ok || !u.Full() {
		return nil
	}
	return []string{fmt.Sprintf("the sandbox's workspace is at its bound as this exec ends: %d of its %d bytes used, %d free, %d of %d files free (its own filesystem): a write past the bound fails with ENOSPC",
		u.Used, u.Size, u.Avail, u.FilesFree, u.Files)}
}

// noteWorkspace adds to what run returns why sb's workspace has no
// bound, or that it is at its bound (workspaceNotes).
func noteWorkspace(sb *Sandbox, run host.RunFunc) host.RunFunc {
	return func(ctx context.Context, j *executor.Job) (*executor.Result, error) {
		res, err := run(ctx, j)
		if res != nil {
			if sb.unbounded != "" {
				res.Notes = append(res.Notes, sb.unbounded)
			}
			res.Notes = append(res.Notes, workspaceNotes(sb.Workspace)...)
		}
		return res, err
	}
}
