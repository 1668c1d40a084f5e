package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/device"
)

// DefaultGPULeaseDir is where a host that gives each GPU to one run at a
// time (Host.GPUExclusive) keeps a lease file per GPU, named by its UUID:
// on /run, shared by every sandbox process of the machine, whatever its
// state directory.
const DefaultGPULeaseDir = "/run/sandbox/gpu"

// ErrGPUBusy is wrapped by the refusal of a run whose GPU another run
// holds, on a host that gives each GPU to one run at a time.
var ErrGPUBusy = errors.New("the GPU is held by another run")

// gpuLease is the locks a run holds on the GPUs it was given.
type gpuLease struct{ files []*os.File }

// leaseGPUs takes, for a unit that uses a GPU on a host that declares it
// gives each GPU to one run at a time, an exclusive lock on every GPU
// the host names (h.Devices), without waiting: a GPU another run holds
// refuses this one, saying which (device.ErrUnavailable, ErrGPUBusy). It
// returns nil where nothing is leased: the host does not declare it, the
// unit uses no GPU, or the host names none (the run's Gpu figure is then
// estimated, as on a host that shares its GPUs).
func (h *Host) leaseGPUs(classes []device.Class) (*gpuLease, error) {
	if !h.GPUExclusive || !slices.Contains(classes, device.GPU) {
		return nil, nil
	}
	dir := h.GPULeaseDir
	if dir == "" {
		dir = DefaultGPULeaseDir
	}
	var ids []string
	for _, d := range h.Devices {
		if d.Class == device.GPU && d.ID != "" {
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the GPU leases: %w", err)
	}
	l := &gpuLease{}
	for _, id := range ids {
		if strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
			l.release()
			return nil, fmt.Errorf("the GPU leases: a GPU id %q cannot name a file", id)
		}
		f, err := os.OpenFile(filepath.Join(dir, id), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			l.release()
			return nil, fmt.Errorf("the GPU lease of %s: %w", id, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(f.Name())
			f.Close()
			l.release()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %w: this host gives each GPU to one run at a time, and %s is held (%s); try again when that run has ended",
					device.ErrUnavailable, ErrGPUBusy, id, strings.TrimSpace(string(holder)))
			}
			return nil, fmt.Errorf("the GPU lease of %s: %w", id, err)
		}
		f.Truncate(0)
		fmt.Fprintf(f, "by sandbox process %d\n", os.Getpid())
		l.files = append(l.files, f)
	}
	return l, nil
}

// release unlocks, then closes, each lease (in that order: a child forked
// in between must not keep a lock its parent gave up).
func (l *gpuLease) release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}
	l.files = nil
}
