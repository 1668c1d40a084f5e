//go:build !linux

package vm

import (
	"context"
	"errors"

	"github.com/opensubstrate/sandbox/internal/job"
	"github.com/opensubstrate/sandbox/tier"
)

var errNotSupported = errors.New("vm: the S5 executor runs on Linux only")

// Probe: S5 is built for Linux hosts.
func (e *Executor) Probe(context.Context) tier.Probe {
	return tier.Probe{Reason: errNotSupported.Error()}
}

// Run refuses.
func (e *Executor) Run(context.Context, *job.Job) (*job.Result, error) { return nil, errNotSupported }
