//go:build !linux

package cgroup

import (
	"errors"
	"os/exec"
)

// StartIn: placing a process in a group at its start needs Linux.
func StartIn(cmd *exec.Cmd, g *Group) error {
	if g == nil {
		return cmd.Start()
	}
	return errors.New("cgroup: placing a process at its start needs Linux")
}
