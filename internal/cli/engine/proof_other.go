//go:build !linux

package engine

// landlockABI: Landlock is Linux's.
func landlockABI() int { return 0 }
