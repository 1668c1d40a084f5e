//go:build !linux

package native

import (
	"context"
	"fmt"

	"github.com/opensubstrate/sandbox/internal/cgroup"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/unit"
	"github.com/opensubstrate/sandbox/tier"
)

// Probe reports that S1 needs Linux.
func (e *Executor) Probe(context.Context) tier.Probe {
	return tier.Probe{Reason: ErrNotSupported.Error()}
}

// Run refuses: S1 needs Linux.
func (e *Executor) Run(context.Context, *executor.Job) (*executor.Result, error) {
	return nil, fmt.Errorf("native: %w", ErrNotSupported)
}

type warmPool struct{}

// Close does nothing: there is no warm init off Linux.
func (e *Executor) Close() error { return nil }

// Prewarm does nothing off Linux.
func (e *Executor) Prewarm() {}

// DenialReports says S1 runs log no kernel denials off Linux.
func DenialReports() (bool, string) { return false, ErrNotSupported.Error() }

// Session is a live S1 sandbox; there is none off Linux.
type Session struct{}

// Open refuses: S1 needs Linux.
func (e *Executor) Open(context.Context, grant.Set, unit.Limits, *cgroup.Group, []int, string) (*Session, error) {
	return nil, fmt.Errorf("native: %w", ErrNotSupported)
}

// Run refuses.
func (s *Session) Run(context.Context, *executor.Job) (*executor.Result, error) {
	return nil, fmt.Errorf("native: %w", ErrNotSupported)
}

// Alive: there is no session off Linux.
func (s *Session) Alive() bool { return false }

// Notes are none.
func (s *Session) Notes() []string { return nil }

// Close does nothing.
func (s *Session) Close() error { return nil }

// Freeze refuses: S1 needs Linux.
func (s *Session) Freeze(context.Context) error { return fmt.Errorf("native: %w", ErrNotSupported) }

// Thaw refuses: S1 needs Linux.
func (s *Session) Thaw(context.Context) error { return fmt.Errorf("native: %w", ErrNotSupported) }

// Frozen refuses: S1 needs Linux.
func (s *Session) Frozen(context.Context) (bool, string, error) {
	return false, "", fmt.Errorf("native: %w", ErrNotSupported)
}

// hostIDs are the host identities S1 leases to runs; none off Linux.
type hostIDs struct{}

// HostID is 0: there is no session off Linux.
func (s *Session) HostID() int { return 0 }
