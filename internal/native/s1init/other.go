//go:build !linux

package s1init

// Main never applies off Linux: S1 needs Linux.
func Main() (int, bool) { return 0, false }
