//go:build !linux

package native

import (
	"context"
	"fmt"

	"github.com/opensubstrate/sandbox/internal/job"
	"github.com/opensubstrate/sandbox/tier"
)

// Probe reports that S1 needs Linux.
func (e *Executor) Probe(context.Context) tier.Probe {
	return tier.Probe{Reason: ErrNotSupported.Error()}
}

// Run refuses: S1 needs Linux.
func (e *Executor) Run(context.Context, *job.Job) (*job.Result, error) {
	return nil, fmt.Errorf("native: %w", ErrNotSupported)
}

type warmPool struct{}

// Close does nothing: there is no warm init off Linux.
func (e *Executor) Close() error { return nil }

// Prewarm does nothing off Linux.
func (e *Executor) Prewarm() {}

// DenialReports says S1 runs log no kernel denials off Linux.
func DenialReports() (bool, string) { return false, ErrNotSupported.Error() }
