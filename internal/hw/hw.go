package hw

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
)

// Describe returns the host and its CPU as an attestation records them.
// procRoot is "/proc" in production.
func Describe(procRoot string) attest.Hardware {
	name, _ := os.Hostname()
	cpu := cpuModel(procRoot)
	kernel := readTrim(filepath.Join(procRoot, "sys", "kernel", "osrelease"))
	h := attest.Hardware{
		Host: attest.Host{Name: name, OS: runtime.GOOS, Arch: runtime.GOARCH, Kernel: kernel, CPU: cpu},
	}
	model := cpu
	if model == "" {
		model = "unknown " + runtime.GOARCH + " CPU"
	}
	driver := runtime.GOOS
	if kernel != "" {
		driver += " " + kernel
	}
	h.Devices = []attest.Device{{Class: device.CPU, Model: model, Driver: driver}}
	return h
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// cpuModel reads the first "model name" of /proc/cpuinfo.
func cpuModel(procRoot string) string {
	f, err := os.Open(filepath.Join(procRoot, "cpuinfo"))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
