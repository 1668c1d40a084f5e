package proof

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Machine is where DetectTarget looks: a root the files are read under
// (/proc, /sys, /dev, /run, /.dockerenv: "/" in production, a fake tree
// in tests), and what only the running program can tell.
type Machine struct {
	Root string
	// Landlock is the kernel's Landlock ABI version (0: none), from the
	// native backend's probe.
	Landlock int
	// Accelerators are the host's devices besides the CPU, each its model
	// and driver.
	Accelerators []string
	// QEMU says a QEMU for this architecture is installed: without KVM,
	// S5 runs under TCG.
	QEMU bool
}

// DetectTarget describes the machine: OS and architecture (this
// program's), kernel (/proc/sys/kernel/osrelease, uname's release), CPU
// (/proc/cpuinfo), virtualisation (virtualisation), cloud (DMI), cgroup
// mode, Landlock, and whether VMs run under KVM (/dev/kvm can be opened)
// or TCG.
func DetectTarget(m Machine) Target {
	r := func(p string) string { return filepath.Join(m.Root, filepath.FromSlash(p)) }
	t := Target{
		OS:           runtime.GOOS,
		Arch:         runtime.GOARCH,
		Kernel:       readTrim(r("/proc/sys/kernel/osrelease")),
		Accelerators: m.Accelerators,
		Landlock:     m.Landlock,
	}
	cpu, flags := cpuInfo(r("/proc/cpuinfo"))
	t.CPU = cpu
	dmi := func(f string) string { return readTrim(r("/sys/class/dmi/id/" + f)) }
	t.Virtualisation = virtualisation(r, dmi, flags)
	t.Cloud = cloud(dmi)
	t.Cgroup = cgroupMode(r)
	switch {
	case canOpen(r("/dev/kvm")):
		t.VM = "kvm"
	case m.QEMU:
		t.VM = "tcg"
	default:
		t.VM = "none"
	}
	return t
}

// cpuInfo is /proc/cpuinfo's first model name (arm64: its "CPU
// implementer"/"Hardware" where there is none) and the first flags line.
func cpuInfo(path string) (model string, flags []string) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil
	}
	defer f.Close()
	var hardware string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if model == "" {
				model = v
			}
		case "Hardware":
			hardware = v
		case "flags", "Features":
			if flags == nil {
				flags = strings.Fields(v)
			}
		}
	}
	if model == "" {
		model = hardware
	}
	return model, flags
}

// dmiVendors are the hypervisors DMI names, by a prefix of sys_vendor,
// product_name, board_vendor or bios_vendor, as systemd-detect-virt
// reads them.
var dmiVendors = []struct{ prefix, name string }{
	{"KVM", "kvm"}, {"OpenStack", "kvm"}, {"KubeVirt", "kvm"}, {"Amazon EC2", "amazon"},
	{"QEMU", "qemu"}, {"VMware", "vmware"}, {"VMW", "vmware"}, {"innotek GmbH", "oracle"},
	{"VirtualBox", "oracle"}, {"Oracle Corporation", "oracle"}, {"Xen", "xen"}, {"Bochs", "bochs"},
	{"Parallels", "parallels"}, {"BHYVE", "bhyve"}, {"Hyper-V", "microsoft"},
	{"Apple Virtualization", "apple"}, {"Google", "google"}, {"Google Compute Engine", "google"},
}

// virtualisation says what the machine is: "<hypervisor> guest" (DMI,
// or "unknown" when only the CPU's hypervisor flag says so), or
// "container (<kind>)" inside a container, or "none".
func virtualisation(r func(string) string, dmi func(string) string, flags []string) string {
	var out []string
	if c := container(r); c != "" {
		out = append(out, "container ("+c+")")
	}
	vm := ""
	for _, f := range []string{"sys_vendor", "product_name", "board_vendor", "bios_vendor"} {
		v := dmi(f)
		if f == "sys_vendor" && v == "Microsoft Corporation" && strings.HasPrefix(dmi("product_name"), "Virtual Machine") {
			vm = "microsoft"
		}
		for _, d := range dmiVendors {
			if vm == "" && v != "" && strings.HasPrefix(v, d.prefix) {
				vm = d.name
			}
		}
	}
	if vm == "" && exists(r("/proc/xen")) {
		vm = "xen"
	}
	if vm == "" {
		for _, f := range flags {
			if f == "hypervisor" {
				vm = "unknown"
			}
		}
	}
	if vm != "" {
		out = append(out, vm+" guest")
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// container names the container the program runs in, "" for none, as
// systemd-detect-virt finds it: PID 1's environment's container=, the
// files docker and podman leave, WSL's kernel release.
func container(r func(string) string) string {
	if b, err := os.ReadFile(r("/proc/1/environ")); err == nil {
		for _, kv := range strings.Split(string(b), "\x00") {
			if v, ok := strings.CutPrefix(kv, "container="); ok && v != "" {
				return v
			}
		}
	}
	if v := readTrim(r("/run/systemd/container")); v != "" {
		return v
	}
	switch {
	case exists(r("/run/.containerenv")):
		return "podman"
	case exists(r("/.dockerenv")):
		return "docker"
	}
	if k := readTrim(r("/proc/sys/kernel/osrelease")); strings.Contains(k, "microsoft") || strings.Contains(k, "Microsoft") {
		return "wsl"
	}
	return ""
}

// cloud names the cloud DMI says the machine is in, "" where it says
// none.
func cloud(dmi func(string) string) string {
	vendor, product, bios, asset := dmi("sys_vendor"), dmi("product_name"), dmi("bios_vendor"), dmi("chassis_asset_tag")
	switch {
	case strings.HasPrefix(vendor, "Amazon EC2") || strings.HasPrefix(bios, "Amazon EC2") || strings.HasPrefix(dmi("product_uuid"), "ec2") || strings.HasPrefix(dmi("product_uuid"), "EC2"):
		return "aws"
	case strings.HasPrefix(product, "Google Compute Engine") || strings.HasPrefix(vendor, "Google"):
		return "gcp"
	case asset == "7783-7084-3265-9085-8269-3286-77":
		return "azure"
	case asset == "OracleCloud.com":
		return "oci"
	case strings.HasPrefix(vendor, "DigitalOcean"):
		return "digitalocean"
	case strings.HasPrefix(vendor, "Hetzner"):
		return "hetzner"
	case strings.HasPrefix(vendor, "Alibaba Cloud") || strings.HasPrefix(product, "Alibaba Cloud"):
		return "alibaba"
	case strings.HasPrefix(vendor, "Scaleway"):
		return "scaleway"
	case strings.HasPrefix(vendor, "Linode") || strings.HasPrefix(vendor, "Akamai"):
		return "linode"
	case strings.HasPrefix(vendor, "Vultr"):
		return "vultr"
	case strings.HasPrefix(product, "OpenStack"):
		return "openstack"
	}
	return ""
}

// cgroupMode is "v2" (the unified hierarchy at /sys/fs/cgroup), "hybrid"
// (v1 with a unified hierarchy beside it), "v1", or "none".
func cgroupMode(r func(string) string) string {
	switch {
	case exists(r("/sys/fs/cgroup/cgroup.controllers")):
		return "v2"
	case exists(r("/sys/fs/cgroup/unified/cgroup.controllers")):
		return "hybrid"
	case exists(r("/sys/fs/cgroup/cpu")) || exists(r("/sys/fs/cgroup/memory")):
		return "v1"
	}
	return "none"
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// canOpen: p opens for reading and writing (KVM's ioctls need both).
func canOpen(p string) bool {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
