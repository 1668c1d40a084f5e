package proof

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

// fakeRoot writes files (path: content) under a new root.
func fakeRoot(t *testing.T, files map[string]string) string {
	root := t.TempDir()
	for p, s := range files {
		f := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const cpuinfoKVMGuest = `processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9654 96-Core Processor
flags		: fpu vme de pse hypervisor sev_snp
processor	: 1
model name	: AMD EPYC 9654 96-Core Processor
`

// TestDetectTarget: the target read from fake trees of the machines a
// cell is made on.
func TestDetectTarget(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		m     Machine
		want  Target
	}{
		{"bare metal, cgroup v2, KVM", map[string]string{
			"proc/sys/kernel/osrelease":        "6.8.0-45-generic\n",
			"proc/cpuinfo":                     "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu vmx\n",
			"sys/class/dmi/id/sys_vendor":      "Supermicro\n",
			"sys/fs/cgroup/cgroup.controllers": "cpu memory pids\n",
			"dev/kvm":                          "",
		}, Machine{Landlock: 6, Accelerators: []string{"NVIDIA H200 (driver 560.35)"}},
			Target{Kernel: "6.8.0-45-generic", CPU: "Intel(R) Xeon(R) Platinum 8480+", Virtualisation: "none", Accelerators: []string{"NVIDIA H200 (driver 560.35)"}, Cgroup: "v2", Landlock: 6, VM: "kvm"}},
		{"an EC2 KVM guest, hybrid cgroups, TCG only", map[string]string{
			"proc/sys/kernel/osrelease":                  "6.1.0-aws",
			"proc/cpuinfo":                               cpuinfoKVMGuest,
			"sys/class/dmi/id/sys_vendor":                "Amazon EC2",
			"sys/class/dmi/id/product_name":              "m7a.large",
			"sys/fs/cgroup/unified/cgroup.controllers":   "",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "",
		}, Machine{QEMU: true},
			Target{Kernel: "6.1.0-aws", CPU: "AMD EPYC 9654 96-Core Processor", Virtualisation: "amazon guest", Cloud: "aws", Cgroup: "hybrid", VM: "tcg"}},
		{"a GCE guest", map[string]string{
			"sys/class/dmi/id/sys_vendor":   "Google",
			"sys/class/dmi/id/product_name": "Google Compute Engine",
			"sys/fs/cgroup/memory/x":        "",
		}, Machine{},
			Target{Virtualisation: "google guest", Cloud: "gcp", Cgroup: "v1", VM: "none"}},
		{"an Azure Hyper-V guest", map[string]string{
			"sys/class/dmi/id/sys_vendor":        "Microsoft Corporation",
			"sys/class/dmi/id/product_name":      "Virtual Machine",
			"sys/class/dmi/id/chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77",
		}, Machine{},
			Target{Virtualisation: "microsoft guest", Cloud: "azure", Cgroup: "none", VM: "none"}},
		{"docker in an unnamed hypervisor's guest", map[string]string{
			".dockerenv":   "",
			"proc/cpuinfo": cpuinfoKVMGuest,
		}, Machine{},
			Target{CPU: "AMD EPYC 9654 96-Core Processor", Virtualisation: "container (docker), unknown guest", Cgroup: "none", VM: "none"}},
		{"a systemd-nspawn container on QEMU", map[string]string{
			"proc/1/environ":                "PATH=/bin\x00container=systemd-nspawn\x00",
			"sys/class/dmi/id/sys_vendor":   "QEMU",
			"sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)",
			"sys/class/dmi/id/board_vendor": "",
			"proc/cpuinfo":                  "Features\t: fp asimd\nHardware\t: BCM2835\n",
		}, Machine{},
			Target{CPU: "BCM2835", Virtualisation: "container (systemd-nspawn), qemu guest", Cgroup: "none", VM: "none"}},
		{"nothing readable", map[string]string{}, Machine{},
			Target{Virtualisation: "none", Cgroup: "none", VM: "none"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.m.Root = fakeRoot(t, c.files)
			c.want.OS, c.want.Arch = runtime.GOOS, runtime.GOARCH
			if got := DetectTarget(c.m); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}
