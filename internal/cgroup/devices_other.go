//go:build !linux

package cgroup

import "fmt"

// attachDeviceProgram: eBPF device programs are Linux's.
func attachDeviceProgram(dir string, allow []Device) error {
	return fmt.Errorf("%w: eBPF device programs need Linux", ErrNoDeviceControl)
}
