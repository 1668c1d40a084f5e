//go:build !linux

package audit

import (
	"context"
	"errors"
)

// ErrNotSupported: audit records are read on Linux only.
var ErrNotSupported = errors.New("audit: not supported on this platform")

// Status is the kernel's audit status.
type Status struct {
	Enabled      bool
	Lost         uint32
	Backlog      uint32
	BacklogLimit uint32
}

// GetStatus reports that there is no audit here.
func GetStatus() (Status, error) { return Status{}, ErrNotSupported }

// SetEnabled reports that there is no audit here.
func SetEnabled(bool) error { return ErrNotSupported }

// Listener is not available off Linux.
type Listener struct{}

// Listen reports that there is no audit here.
func Listen() (*Listener, error) { return nil, ErrNotSupported }

// Fence reports that there is no audit here.
func (l *Listener) Fence(context.Context) error { return ErrNotSupported }

// Landlock reports nothing.
func (l *Listener) Landlock(int) (Report, bool) { return Report{}, false }

// Ended reports true: there is nothing to wait for.
func (l *Listener) Ended(int) bool { return true }

// Close does nothing.
func (l *Listener) Close() error { return nil }

// LandlockOfUID reports nothing off Linux.
func (l *Listener) LandlockOfUID(int) (Report, bool) { return Report{}, false }

// EndedUID is true off Linux: there is nothing to wait for.
func (l *Listener) EndedUID(int) bool { return true }
