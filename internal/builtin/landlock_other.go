//go:build !linux

package builtin

// LandlockABI is 0: Landlock is Linux's.
func LandlockABI() int { return 0 }
