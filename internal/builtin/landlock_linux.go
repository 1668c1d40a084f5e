package builtin

import "github.com/opensubstrate/sandbox/internal/native/s1init"

// LandlockABI is the kernel's Landlock ABI version as S1's probe reads
// it, 0 for none: a fact of the machine a proof cell records.
func LandlockABI() int { return s1init.ABI() }
