//go:build linux

package syscalls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/confine"
)

// TestDocsListEveryDeniedSyscall keeps docs/s1.md true to the filter.
func TestDocsListEveryDeniedSyscall(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "s1.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range Denied {
		for _, n := range d.Names {
			if !strings.Contains(string(b), "`"+n+"`") {
				t.Errorf("docs/s1.md does not list %s", n)
			}
		}
		if !strings.Contains(string(b), d.Why) {
			t.Errorf("docs/s1.md lacks the reason %q", d.Why)
		}
	}
	for _, r := range Restricted {
		for _, n := range r.Names {
			if !strings.Contains(string(b), "`"+n+"`") {
				t.Errorf("docs/s1.md does not list %s", n)
			}
		}
		for _, s := range []string{r.When, r.Why} {
			if !strings.Contains(string(b), s) {
				t.Errorf("docs/s1.md lacks %q", s)
			}
		}
	}
}

// TestFiltersRefuseOtherArchitecturesFirst: every filter begins by
// loading the system call's architecture and refusing any but this one,
// and is the same instructions each time it is asked for.
func TestFiltersRefuseOtherArchitecturesFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter func() ([]confine.Insn, error)
	}{
		{"S1", S1Filter},
		{"monitor", MonitorFilter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tc.filter()
			if err != nil {
				t.Fatal(err)
			}
			if len(f) < 4 {
				t.Fatalf("%d instructions", len(f))
			}
			// ld [4] (seccomp_data.arch); jeq ARCH, skip 1; ret ERRNO(EPERM)
			if f[0].Code != unix.BPF_LD|unix.BPF_W|unix.BPF_ABS || f[0].K != 4 {
				t.Fatalf("first instruction %+v: not a load of the architecture", f[0])
			}
			if f[1].Code != unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K || f[1].Jt != 1 || f[1].Jf != 0 {
				t.Fatalf("second instruction %+v: not a test of the architecture", f[1])
			}
			if f[2].Code != unix.BPF_RET|unix.BPF_K || f[2].K != uint32(errnoAction(unix.EPERM)) {
				t.Fatalf("third instruction %+v: another architecture is not refused", f[2])
			}
			again, _ := tc.filter()
			if confine.InsnsText(again) != confine.InsnsText(f) {
				t.Fatal("a second assembly differs")
			}
		})
	}
}

// TestMonitorGroupsAreS1Groups: each group the monitor is refused is one
// of S1's, named by its first system call.
func TestMonitorGroupsAreS1Groups(t *testing.T) {
	for _, m := range MonitorDenied {
		found := false
		for _, d := range Denied {
			found = found || d.Names[0] == m
		}
		if !found {
			t.Errorf("MonitorDenied names %q, which begins no group of Denied", m)
		}
	}
}
