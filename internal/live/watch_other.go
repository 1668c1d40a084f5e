//go:build !linux

package live

import (
	"context"
	"errors"
)

// Watch is Linux only (inotify, openat2).
func (h *Manager) Watch(ctx context.Context, id, owner, p string, recursive bool, send func(WatchEvent) error) error {
	return errWatchNotLinux
}

// Watching is a watch set up: none here.
type Watching struct{}

// OpenWatch is Linux only.
func (h *Manager) OpenWatch(ctx context.Context, id, owner, p string, recursive bool) (*Watching, error) {
	return nil, errWatchNotLinux
}

// Close does nothing.
func (wt *Watching) Close() {}

// Run is Linux only.
func (wt *Watching) Run(ctx context.Context, send func(WatchEvent) error) error {
	return errWatchNotLinux
}

// errWatchNotLinux: there is no inotify here.
var errWatchNotLinux = errors.New("watching a sandbox's files needs Linux (inotify)")
