//go:build !linux

package vm

import (
	"context"
	"errors"
	"net"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/tier"
)

var errNotSupported = errors.New("vm: the S5 executor runs on Linux only")

// Probe: S5 is built for Linux hosts.
func (e *Executor) Probe(context.Context) tier.Probe {
	return tier.Probe{Reason: errNotSupported.Error()}
}

// Run refuses.
func (e *Executor) Run(context.Context, *executor.Job) (*executor.Result, error) {
	return nil, errNotSupported
}

// Session: live S5 sandboxes need Linux.
type Session struct{}

// Open refuses.
func (e *Executor) Open(context.Context, grant.Set, unit.Limits, *cgroup.Group) (*Session, error) {
	return nil, errNotSupported
}

// Reopen refuses.
func (e *Executor) Reopen(context.Context, grant.Set, unit.Limits, *cgroup.Group, string) (*Session, error) {
	return nil, errNotSupported
}

func (e *Executor) open(context.Context, grant.Set, unit.Limits, *cgroup.Group, string, []int) (*Session, error) {
	return nil, errNotSupported
}

// BootImage refuses.
func (e *Executor) BootImage() (addr.Addr, error) { return addr.Addr{}, errNotSupported }

func (s *Session) Run(context.Context, *executor.Job) (*executor.Result, error) {
	return nil, errNotSupported
}
func (s *Session) Notes() []string { return nil }
func (s *Session) Alive() bool     { return false }
func (s *Session) Suspend(context.Context, string) (*executor.Snapshot, error) {
	return nil, errNotSupported
}
func (s *Session) Freeze(context.Context) error                 { return errNotSupported }
func (s *Session) Thaw(context.Context) error                   { return errNotSupported }
func (s *Session) Frozen(context.Context) (bool, string, error) { return false, "", errNotSupported }
func (s *Session) Continue(context.Context) error               { return errNotSupported }
func (s *Session) Paused(context.Context) (bool, string, error) { return false, "", errNotSupported }
func (s *Session) Close() error                                 { return nil }
func (s *Session) DialPort(context.Context, int) (net.Conn, error) {
	return nil, errNotSupported
}

// Firecracker: S5 needs Linux.
type Firecracker struct{}

// NewFirecracker is the Firecracker executor, refusing off Linux.
func NewFirecracker(Config, string) *Firecracker { return &Firecracker{} }

func (*Firecracker) Name() string    { return "firecracker" }
func (*Firecracker) Tier() tier.Tier { return tier.S5 }
func (*Firecracker) Kind() tier.Kind { return tier.VM }
func (*Firecracker) Probe(context.Context) tier.Probe {
	return tier.Probe{Reason: errNotSupported.Error()}
}
func (*Firecracker) Run(context.Context, *executor.Job) (*executor.Result, error) {
	return nil, errNotSupported
}
