package hw

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
)

// Describe returns the host and its CPU as an attestation records them.
// procRoot is "/proc" in production. The CPU's model and the kernel's
// release, which cannot change while this process runs, are read once
// per procRoot (where both could be read); the host's name, which can,
// every time.
func Describe(procRoot string) attest.Hardware {
	name, _ := os.Hostname()
	f := facts(procRoot)
	h := attest.Hardware{
		Host: attest.Host{Name: name, OS: runtime.GOOS, Arch: runtime.GOARCH, Kernel: f.kernel, CPU: f.cpu},
	}
	model := f.cpu
	if model == "" {
		model = "unknown " + runtime.GOARCH + " CPU"
	}
	driver := runtime.GOOS
	if f.kernel != "" {
		driver += " " + f.kernel
	}
	h.Devices = []attest.Device{{Class: device.CPU, Model: model, Driver: driver}}
	return h
}

// fixed is what Describe reads once: the CPU's model and the kernel's
// release.
type fixed struct{ cpu, kernel string }

// known holds the fixed facts of each procRoot, once read whole.
var known sync.Map // procRoot → fixed

// facts are procRoot's fixed facts: kept from an earlier call, or read
// (and kept where cpuinfo and osrelease could both be read: one missing
// is looked for again next time).
func facts(procRoot string) fixed {
	if f, ok := known.Load(procRoot); ok {
		return f.(fixed)
	}
	cpu, cpuRead := cpuModel(procRoot)
	kernel := readTrim(filepath.Join(procRoot, "sys", "kernel", "osrelease"))
	f := fixed{cpu: cpu, kernel: kernel}
	if cpuRead && kernel != "" {
		known.Store(procRoot, f)
	}
	return f
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cpuModel reads the first "model name" of /proc/cpuinfo, and says
// whether the file could be read (some architectures name no model).
func cpuModel(procRoot string) (string, bool) {
	f, err := os.Open(filepath.Join(procRoot, "cpuinfo"))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v), true
		}
	}
	return "", sc.Err() == nil
}
