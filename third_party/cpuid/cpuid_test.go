package cpuid

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestAsTheKernelSays: on Linux/amd64 the answers are the kernel's flags
// in /proc/cpuinfo (avx2, sse4_1), which, like klauspost/cpuid, it
// shows only where the feature is usable.
func TestAsTheKernelSays(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		if CPU.Has(AVX2) || CPU.Has(SSE4) {
			t.Errorf("x86 features off x86: AVX2 %v, SSE4 %v", CPU.Has(AVX2), CPU.Has(SSE4))
		}
		return
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	var flags []string
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	if flags == nil {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	has := func(f string) bool {
		for _, x := range flags {
			if x == f {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		id   FeatureID
		flag string
	}{{AVX2, "avx2"}, {SSE4, "sse4_1"}} {
		if CPU.Has(c.id) != has(c.flag) {
			t.Errorf("%s: Has says %v, /proc/cpuinfo %v", c.flag, CPU.Has(c.id), has(c.flag))
		}
	}
	if CPU.Has(0) {
		t.Error("Has(0): an unknown feature is not had")
	}
}
