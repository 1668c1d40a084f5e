package boot

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/safefile"
)

// Type is the manifest's type.
const Type = "sandbox.vm/1"

// Manifest names a guest's kernel and initramfs by content address.
type Manifest struct {
	Type string `json:"type"`
	// Kernel is the kernel: the ELF (vmlinux) with a PVH entry point
	// where Build could take it out of the bzImage (Uncompress), else
	// the bzImage. Initrd is the initramfs.
	Kernel addr.Addr `json:"kernel"`
	Initrd addr.Addr `json:"initrd"`
	// Release is the kernel's release, as the guest's uname -r says it.
	Release string `json:"release"`
	// Cmdline is the kernel command line the guest boots with.
	Cmdline string `json:"cmdline"`
}

// Cmdline is the command line of the images Build makes: the console on
// the microvm's serial port, a panic powers the VM off at once (QEMU runs
// with -no-reboot), no time spent probing what the microvm has not, nor
// testing the kernel's crypto implementations as each registers
// (cryptomgr.notests): the guest's kernel guards nothing of the host's,
// and Debian's runs those self-tests on every boot, 0.39 s of the 1.32 s
// a TCG guest took to reach its init here (2026-12-07).
const Cmdline = "console=ttyS0 panic=-1 oops=panic reboot=t loglevel=4 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd tsc=reliable cryptomgr.notests rdinit=/init"

// Modules are the kernel modules a guest loads, with their
// dependencies: the virtio transport, the agent's serial port (QEMU) or
// vsock (Firecracker, which has no virtio-serial), 9p for grants and
// virtio-net for egress.
var Modules = []string{"virtio_mmio", "virtio_console", "vmw_vsock_virtio_transport", "9pnet_virtio", "9p", "virtio_net"}

// Applets are the busybox commands linked in ToolDir.
var Applets = []string{"sh", "cat", "echo", "ls", "sleep", "kill", "mkdir", "rm", "cp", "mv", "head", "tail", "wc", "dd", "uname", "id", "ps", "mount", "umount", "grep", "sed", "tr", "true", "false", "test", "seq", "sha256sum", "sync", "free", "hostname", "stat", "touch", "chmod", "ln", "env", "nc", "netstat"}

// ManifestName is the manifest's file name in an image directory; the
// kernel and initramfs lie beside it, named by their addresses.
const ManifestName = "manifest.json"

// Image is a checked boot image on disk.
type Image struct {
	Manifest Manifest
	Addr     addr.Addr // the manifest's address (its bytes as stored)
	Kernel   string    // paths
	Initrd   string
}

// ErrImage is wrapped by every refusal of an image.
var ErrImage = errors.New("boot: unusable guest image")

// Open reads the image in dir and checks both files against their
// addresses; it refuses a missing or altered one, naming it.
func Open(dir string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("%w: %v (build one with `sandbox vm build`)", ErrImage, err)
	}
	return OpenManifest(b, dir)
}

// OpenManifest checks the manifest b and the files it names in dir.
func OpenManifest(b []byte, dir string) (*Image, error) {
	m, err := ParseManifest(b)
	if err != nil {
		return nil, err
	}
	im := &Image{Manifest: m, Addr: addr.Of(b), Kernel: filepath.Join(dir, m.Kernel.Hex()), Initrd: filepath.Join(dir, m.Initrd.Hex())}
	for _, f := range []struct {
		what, path string
		want       addr.Addr
	}{{"kernel", im.Kernel, m.Kernel}, {"initramfs", im.Initrd, m.Initrd}} {
		got, err := addr.OfFile(f.path)
		if err != nil {
			return nil, fmt.Errorf("%w: the %s %s is not here: %v", ErrImage, f.what, f.want, err)
		}
		if got != f.want {
			return nil, fmt.Errorf("%w: the %s at %s is %s, not the %s its manifest names", ErrImage, f.what, f.path, got, f.want)
		}
	}
	return im, nil
}

// ParseManifest decodes a sandbox.vm/1 manifest, refusing unknown fields
// and one that does not name both files.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: the manifest: %v", ErrImage, err)
	}
	if d.More() {
		return m, fmt.Errorf("%w: the manifest holds more than one value", ErrImage)
	}
	if m.Type != Type || m.Kernel.IsZero() || m.Initrd.IsZero() {
		return m, fmt.Errorf("%w: not a %s manifest naming a kernel and an initramfs", ErrImage, Type)
	}
	if strings.ContainsAny(m.Cmdline, "\x00\n") || !strings.Contains(" "+m.Cmdline+" ", " rdinit=/init ") {
		return m, fmt.Errorf("%w: the manifest's command line must boot /init, the guest agent", ErrImage)
	}
	return m, nil
}

// TCGClock is what a guest's command line needs under TCG (QEMU's
// software emulation): the host's TSC rate, " tsc_early_khz=N" (""
// where /proc/cpuinfo does not say it). A TCG guest reads the host's
// TSC, and calibrating it against the emulated PIT fails often enough
// on a loaded host that the guest then hangs without a clock (seen here
// in 3 boots of 8).
func TCGClock() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
				return " tsc_early_khz=" + strconv.Itoa(int(f*1000))
			}
		}
	}
	return ""
}

// ToolDir is where an image's own tools lie in the guest (busybox and its
// applets), for guests that run without the host's /usr: a snapshot
// cannot be taken while a 9p share is mounted (QEMU blocks migration).
const ToolDir = "/sandbox/bin"

// Build makes a boot image in out from a Debian kernel package's tree
// (kernelDir holds boot/vmlinuz-* and lib/modules/*, as `dpkg-deb -x`
// leaves them) and the guest agent binary, with busybox (a static one,
// Debian's busybox-static; "" for none) in ToolDir, and returns it
// checked. The image's kernel is the uncompressed ELF inside the
// bzImage where Uncompress can take it out, else the bzImage.
func Build(kernelDir, agent, busybox, out string) (*Image, error) {
	kernels, _ := filepath.Glob(filepath.Join(kernelDir, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return nil, fmt.Errorf("%w: want one boot/vmlinuz-* in %s, found %d", ErrImage, kernelDir, len(kernels))
	}
	release := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	modRoot := filepath.Join(kernelDir, "lib", "modules", release)
	mods, err := resolve(modRoot, Modules)
	if err != nil {
		return nil, err
	}
	ag, err := os.ReadFile(agent)
	if err != nil {
		return nil, fmt.Errorf("boot: the guest agent: %w", err)
	}
	entries := []entry{
		{name: "init", mode: sIFREG | 0o755, data: ag},
		{name: "dev", mode: sIFDIR | 0o755},
		{name: "dev/console", mode: sIFCHR | 0o600, rmajor: 5, rminor: 1},
		{name: "etc", mode: sIFDIR | 0o755},
		{name: "etc/passwd", mode: sIFREG | 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")},
		{name: "etc/group", mode: sIFREG | 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		{name: "etc/hosts", mode: sIFREG | 0o644, data: []byte("127.0.0.1 localhost\n")},
		{name: "etc/hostname", mode: sIFREG | 0o644, data: []byte("guest\n")},
		{name: "proc", mode: sIFDIR | 0o555},
		{name: "sys", mode: sIFDIR | 0o555},
		{name: "tmp", mode: sIFDIR | 0o1777},
		{name: "run", mode: sIFDIR | 0o755},
		{name: "root", mode: sIFDIR | 0o700},
		{name: "usr", mode: sIFDIR | 0o755},
		{name: "bin", mode: sIFLNK | 0o777, data: []byte("usr/bin")},
		{name: "sbin", mode: sIFLNK | 0o777, data: []byte("usr/sbin")},
		{name: "lib", mode: sIFLNK | 0o777, data: []byte("usr/lib")},
		{name: "lib64", mode: sIFLNK | 0o777, data: []byte("usr/lib64")},
		{name: "sandbox", mode: sIFDIR | 0o755},
		{name: "sandbox/modules", mode: sIFDIR | 0o755},
	}
	if busybox != "" {
		bb, err := os.ReadFile(busybox)
		if err != nil {
			return nil, fmt.Errorf("boot: busybox: %w", err)
		}
		entries = append(entries, entry{name: "sandbox/bin", mode: sIFDIR | 0o755}, entry{name: "sandbox/bin/busybox", mode: sIFREG | 0o755, data: bb})
		for _, a := range Applets {
			entries = append(entries, entry{name: "sandbox/bin/" + a, mode: sIFLNK | 0o777, data: []byte("busybox")})
		}
	}
	var order []string
	for _, m := range mods {
		b, err := os.ReadFile(m.path)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{name: "sandbox/modules/" + m.name + ".ko", mode: sIFREG | 0o644, data: b})
		order = append(order, m.name+".ko")
	}
	entries = append(entries, entry{name: "sandbox/modules/order", mode: sIFREG | 0o644, data: []byte(strings.Join(order, "\n") + "\n")})
	var initrd bytes.Buffer
	if err := writeCpio(&initrd, entries); err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(kernels[0])
	if err != nil {
		return nil, err
	}
	// The guest boots the ELF inside, entered directly, where it can be
	// had; else the bzImage, which decompresses itself (slower).
	if elfKernel, err := Uncompress(kb); err == nil {
		kb = elfKernel
	} else if !errors.Is(err, ErrNoPVH) {
		return nil, err
	}
	m := Manifest{Type: Type, Kernel: addr.Of(kb), Initrd: addr.Of(initrd.Bytes()), Release: release, Cmdline: Cmdline}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		a addr.Addr
		b []byte
	}{{m.Kernel, kb}, {m.Initrd, initrd.Bytes()}} {
		if err := safefile.Write(filepath.Join(out, f.a.Hex()), f.b, 0o644); err != nil {
			return nil, err
		}
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := safefile.Write(filepath.Join(out, ManifestName), append(mb, '\n'), 0o644); err != nil {
		return nil, err
	}
	return Open(out)
}

type module struct{ name, path string }

// resolve finds the named modules under root and their dependencies (the
// depends= of each module's .modinfo), in an order that loads every
// dependency first. Debian's package carries no modules.dep (depmod
// makes it at install), so the modules say it themselves.
func resolve(root string, want []string) ([]module, error) {
	paths := map[string]string{}
	err := filepath.WalkDir(filepath.Join(root, "kernel"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			n := strings.TrimSuffix(filepath.Base(p), ".ko")
			paths[strings.ReplaceAll(n, "-", "_")] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: kernel modules: %v", ErrImage, err)
	}
	var out []module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string) error
	visit = func(n string) error {
		n = strings.ReplaceAll(n, "-", "_")
		switch state[n] {
		case 1:
			return fmt.Errorf("%w: module %s depends on itself", ErrImage, n)
		case 2:
			return nil
		}
		p, ok := paths[n]
		if !ok {
			return fmt.Errorf("%w: module %s is not in %s (is it built in, or is this the cloud kernel, which has no 9p?)", ErrImage, n, root)
		}
		state[n] = 1
		deps, err := depends(p)
		if err != nil {
			return err
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, module{name: strings.TrimSuffix(filepath.Base(p), ".ko"), path: p})
		return nil
	}
	for _, n := range want {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// depends reads a module's depends= from its .modinfo section.
func depends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrImage, path, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, nil
	}
	b, err := s.Data()
	if err != nil {
		return nil, err
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
