package live

import (
	"github.com/opensubstrate/sandbox/internal/host"

	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/authority"
	"github.com/opensubstrate/sandbox/internal/grant"
)

// MaxUpload is the largest file Upload takes, by default.
const MaxUpload = 256 << 20

// FileInfo is one entry of a listing.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    os.FileMode
	ModTime time.Time
}

// grantFor finds the storage grant of sb that covers p (an absolute,
// clean path without a NUL byte: invalid otherwise), and the rest of p
// beneath it. Everything a run wrote is
// hostile: the rest is opened beneath the grant's directory with no
// symlink followed, no magic link, no other mount.
func (sb *Sandbox) grantFor(p string, write bool) (grant.Storage, string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return grant.Storage{}, "", &host.InvalidError{Err: fmt.Errorf("path %q: a NUL byte, which no path holds", p)}
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return grant.Storage{}, "", &host.InvalidError{Err: fmt.Errorf("path %q: want an absolute, clean path", p)}
	}
	best := -1
	for i, s := range sb.Grants.Storage {
		if grant.Within(s.Path, p) && (best < 0 || len(s.Path) > len(sb.Grants.Storage[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return grant.Storage{}, "", fmt.Errorf("%w: %s is under none of sandbox %s's storage grants", grant.ErrDenied, p, sb.ID)
	}
	s := sb.Grants.Storage[best]
	if write && s.Mode != grant.RW {
		return grant.Storage{}, "", fmt.Errorf("%w: %s is under fs:%s, which is read-only", grant.ErrDenied, p, s.Path)
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(p, s.Path), "/")
	return s, rest, nil
}

// Upload writes r (at most max bytes; 0: MaxUpload) to path p in a live
// sandbox, which must be under a read-write grant of it: to a temporary
// name beside it, fsynced, then renamed over p. A link on the way is
// refused; nothing half-written is ever seen under p.
func (h *Manager) Upload(ctx context.Context, id, owner, p string, r io.Reader, mode os.FileMode, max int64) (int64, error) {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		return 0, err
	}
	s, rest, err := sb.grantFor(p, true)
	if err != nil {
		return 0, err
	}
	if err := h.authorizeFiles(ctx, sb, owner, s, grant.RW); err != nil {
		return 0, err
	}
	if rest == "" {
		return 0, &host.InvalidError{Err: fmt.Errorf("%s is the grant's directory itself, not a file in it", p)}
	}
	if max <= 0 {
		max = MaxUpload
	}
	dir, err := openBeneath(s.Path, filepath.Dir(rest), dirFlags, 0)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	base := filepath.Base(rest)
	tmp := fmt.Sprintf(".%s.upload-%d", base, time.Now().UnixNano())
	fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return 0, &os.PathError{Op: "create", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	n, err := io.Copy(f, io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = &host.LimitError{What: fmt.Sprintf("an upload is at most %d bytes", max)}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), base)
	}
	if err != nil {
		unix.Unlinkat(int(dir.Fd()), tmp, 0)
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return 0, &host.LimitError{What: fmt.Sprintf("%s: no space under fs:%s (its bound, or the disk's): %v", p, s.Path, err)}
		}
		return 0, err
	}
	return n, nil
}

// Download opens the regular file p of a live sandbox (under any of its
// storage grants) for reading.
func (h *Manager) Download(ctx context.Context, id, owner, p string) (*os.File, os.FileInfo, error) {
	of, err := h.openReadable(ctx, id, owner, p, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	f := of.f
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = &host.InvalidError{Err: fmt.Errorf("%s is not a regular file (%s)", p, fi.Mode().Type())}
		}
		return nil, nil, err
	}
	return f, fi, nil
}

// List lists directory p of a live sandbox (under any of its storage
// grants), by name; links are listed, never followed.
func (h *Manager) List(ctx context.Context, id, owner, p string) ([]FileInfo, error) {
	f, err := h.openReadable(ctx, id, owner, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer f.f.Close()
	ents, err := f.f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, 0, len(ents))
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, FileInfo{Name: e.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// opened is path p of a sandbox, opened for reading: the sandbox, the
// grant it is under, and the rest of p beneath that grant.
type opened struct {
	sb    *Sandbox
	grant grant.Storage
	rest  string
	f     *os.File
}

// openReadable opens path p of owner's live sandbox id with flags, for
// reading: under one of its storage grants, which owner may itself
// grant read-only, beneath the grant's directory with no link followed.
func (h *Manager) openReadable(ctx context.Context, id, owner, p string, flags int) (opened, error) {
	sb, err := h.sandbox(id, owner)
	if err != nil {
		return opened{}, err
	}
	s, rest, err := sb.grantFor(p, false)
	if err != nil {
		return opened{}, err
	}
	if err := h.authorizeFiles(ctx, sb, owner, s, grant.RO); err != nil {
		return opened{}, err
	}
	f, err := openBeneath(s.Path, rest, flags, 0)
	if err != nil {
		return opened{}, err
	}
	return opened{sb: sb, grant: s, rest: rest, f: f}, nil
}

// authorizeFiles checks that owner (held to ctx's narrowings) may itself
// grant what a files call reaches through: the grant s of sandbox sb, in
// mode. A sandbox can hold grants its caller may not give (an operator's
// sandbox, reached by a narrowed MCP connection).
func (h *Manager) authorizeFiles(ctx context.Context, sb *Sandbox, owner string, s grant.Storage, mode grant.Mode) error {
	return h.Authorize(ctx, owner, authority.Ask{Action: "files", Grants: grant.Set{Storage: []grant.Storage{{Path: s.Path, Mode: mode}}}, Tier: sb.Tier})
}
