package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoDeviceControl is returned by SetDevices where the group is in no
// hierarchy that controls devices: neither v1's devices controller nor
// the unified hierarchy (whose device control is an eBPF program).
var ErrNoDeviceControl = errors.New("cgroup: no device control for the group")

// Any is a device number that matches every major or minor.
const Any = -1

// Device is one device a group may open: a character ('c') or block ('b')
// device by its numbers (Any for every one), with its access ("r", "w",
// "m" for mknod, any of them together).
type Device struct {
	Type         byte
	Major, Minor int64
	Access       string
}

func (d Device) String() string {
	num := func(n int64) string {
		if n == Any {
			return "*"
		}
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%c %s:%s %s", d.Type, num(d.Major), num(d.Minor), d.Access)
}

func (d Device) valid() error {
	if d.Type != 'c' && d.Type != 'b' {
		return fmt.Errorf("device type %q is neither c nor b", d.Type)
	}
	if d.Major < Any || d.Minor < Any || d.Major > 1<<31-1 || d.Minor > 1<<31-1 {
		return fmt.Errorf("device numbers %d:%d are out of range", d.Major, d.Minor)
	}
	if d.Access == "" || strings.Trim(d.Access, "rwm") != "" {
		return fmt.Errorf("device access %q is not made of r, w and m", d.Access)
	}
	return nil
}

// SetDevices makes the group refuse every device but those allowed: an
// open (or mknod) of any other device node by a process in the group
// fails with EPERM, wherever the node is. On v1 it writes "a" to
// devices.deny and each allowed device to devices.allow; where the group
// has no v1 devices controller but is in the unified hierarchy, it
// attaches an eBPF program (BPF_PROG_TYPE_CGROUP_DEVICE) that allows
// exactly those devices. Call it before any process is in the group.
// Set again to the same devices, it writes nothing; on v1 another set
// replaces the first, but on v2 the programs of both hold at once (a
// device must pass each), so set a group's devices there once.
func (g *Group) SetDevices(allow []Device) error {
	if g.devices != nil && slices.Equal(g.devices, allow) {
		return nil
	}
	g.devices = nil
	for _, d := range allow {
		if err := d.valid(); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	if dir, ok := g.V1["devices"]; ok {
		if err := os.WriteFile(filepath.Join(dir, "devices.deny"), []byte("a"), 0o644); err != nil {
			return fmt.Errorf("cgroup: %s/devices.deny: %w", dir, err)
		}
		for _, d := range allow {
			if err := os.WriteFile(filepath.Join(dir, "devices.allow"), []byte(d.String()), 0o644); err != nil {
				return fmt.Errorf("cgroup: %s/devices.allow %q: %w", dir, d, err)
			}
		}
	} else if g.V2 != "" {
		if err := attachDeviceProgram(g.V2, allow); err != nil {
			return err
		}
	} else {
		return fmt.Errorf("%w %s (no v1 devices controller, no unified hierarchy)", ErrNoDeviceControl, g.Name)
	}
	g.devices = append([]Device{}, allow...)
	return nil
}

// DevicesReplaceable says whether a second SetDevices replaces the
// first (v1's devices controller), rather than adding a program that
// must pass too (v2).
func (g *Group) DevicesReplaceable() bool {
	_, ok := g.V1["devices"]
	return ok
}
