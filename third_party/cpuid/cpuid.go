package cpuid

import "golang.org/x/sys/cpu"

// FeatureID is a CPU feature, as klauspost/cpuid names it.
type FeatureID int

const (
	// AVX2 is Advanced Vector Extensions 2, usable (the OS saves the YMM
	// registers).
	AVX2 FeatureID = iota + 1
	// SSE4 is SSE4.1.
	SSE4
)

// CPUInfo is what is known of this CPU.
type CPUInfo struct {
	avx2, sse41 bool
}

// CPU is this machine's CPU, detected at start.
var CPU = CPUInfo{
	avx2:  cpu.X86.HasAVX && cpu.X86.HasAVX2,
	sse41: cpu.X86.HasSSE41,
}

// Has says whether the CPU has feature id.
func (c CPUInfo) Has(id FeatureID) bool {
	switch id {
	case AVX2:
		return c.avx2
	case SSE4:
		return c.sse41
	}
	return false
}
