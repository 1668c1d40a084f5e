package engine

import "github.com/opensubstrate/sandbox/internal/native/s1init"

// landlockABI is the kernel's Landlock ABI version, 0 for none.
func landlockABI() int { return s1init.ABI() }
