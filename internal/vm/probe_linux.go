package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/confine"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/vm/boot"
	"github.com/opensubstrate/sandbox/internal/vm/wire"
	"github.com/opensubstrate/sandbox/tier"
)

func (e *Executor) executorName(accel string) string {
	v, _ := e.version()
	return "qemu-microvm/" + v + "+" + accel
}

func (e *Executor) accelNote(accel, why string) string {
	if accel == "kvm" {
		return "S5 accelerator: KVM (hardware virtualization, proved by a boot on this host)"
	}
	return "S5 accelerator: TCG, QEMU's software emulation, not KVM (" + why + "): the guest's kernel boundary is the same, its speed is not"
}

// accelerator is the accelerator runs use, proved once per host: KVM
// when a boot under it answered in time, else TCG (why says why not KVM).
func (e *Executor) accelerator(ctx context.Context, im *boot.Image) (string, string) {
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if e.st.accel != "" {
		return e.st.accel, e.st.why
	}
	switch e.cfg.Accel {
	case "tcg":
		e.st.accel, e.st.why = "tcg", "TCG was asked for"
	case "kvm":
		e.st.accel = "kvm"
	default:
		e.st.accel = "tcg"
		if f, err := os.OpenFile(e.cfg.KVM, os.O_RDWR, 0); err != nil {
			e.st.why = "no usable KVM: " + err.Error()
		} else {
			f.Close()
			kctx, cancel := context.WithTimeout(ctx, KVMProbeTimeout)
			_, err := e.check(kctx, im, "kvm")
			cancel()
			if err == nil {
				e.st.accel = "kvm"
			} else {
				e.st.why = fmt.Sprintf("%s is present, but a guest did not boot under it within %s: %v", e.cfg.KVM, KVMProbeTimeout, err)
			}
		}
	}
	return e.st.accel, e.st.why
}

// Probe boots a guest and checks from inside it that it runs its own
// kernel, sees none of the host's processes and none of its files but
// what it was given, and cannot write what it was given read-only. The
// answer is kept once available.
func (e *Executor) Probe(ctx context.Context) tier.Probe {
	return e.st.probe.Get(func() tier.Probe { return e.probe(ctx) })
}

func (e *Executor) probe(ctx context.Context) tier.Probe {
	v, err := e.version()
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	im, err := boot.Open(e.cfg.ImageDir)
	if err != nil {
		return tier.Probe{Reason: err.Error()}
	}
	accel, _ := e.accelerator(ctx, im)
	pctx, cancel := context.WithTimeout(ctx, bootTimeout(accel))
	defer cancel()
	layers, err := e.check(pctx, im, accel)
	if err != nil {
		return tier.Probe{Reason: "a probe guest: " + err.Error(), Layers: layers}
	}
	return tier.Probe{Available: true, Layers: layers, Reason: fmt.Sprintf("a %s microVM booted (QEMU %s) and, from inside, ran its own kernel %s, saw none of the host's processes or files and only its grants, read-only where granted so",
		strings.ToUpper(accel), v, im.Manifest.Release)}
}

// version is QEMU's, read once.
func (e *Executor) version() (string, error) {
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if e.st.qemu != "" {
		return e.st.qemu, nil
	}
	v, err := qemuVersion(e.cfg.QEMU)
	if err != nil {
		return "", err
	}
	e.st.qemu = v
	return v, nil
}

// check boots a guest under accel with one read-write and one read-only
// grant and tries, from inside, what the rung promises.
func (e *Executor) check(ctx context.Context, im *boot.Image, accel string) ([]tier.Layer, error) {
	dir, err := e.cfg.mkTemp("sandbox-vm-probe")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rw, ro, hidden := filepath.Join(dir, "rw"), filepath.Join(dir, "ro"), filepath.Join(dir, "hidden")
	for _, d := range []string{rw, ro, hidden} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	marker := strconv.FormatInt(time.Now().UnixNano(), 36)
	os.WriteFile(filepath.Join(ro, "granted"), []byte(marker), 0o644)
	os.WriteFile(filepath.Join(hidden, "secret"), []byte(marker), 0o600)
	// Its shares are held as a run's are (grant.Reach, then by
	// descriptor), so the probe proves the path runs take.
	shares, err := e.shares([]grant.Storage{{Path: rw, Mode: grant.RW}, {Path: ro, Mode: grant.RO}}, nil, true)
	if err != nil {
		return nil, err
	}
	spec := Spec{Image: im, QEMU: e.cfg.QEMU, Jail: e.cfg.Jail, Accel: accel, MemoryMiB: 256, CPUs: 1, Dir: dir, Hostname: "probe", Shares: shares}
	m, err := Start(ctx, spec)
	closeShares(shares)
	if err != nil {
		return nil, err
	}
	defer m.Kill()
	var layers []tier.Layer
	layer := func(name string, ok bool, detail string) {
		layers = append(layers, tier.Layer{Name: name, OK: ok, Detail: detail})
		if !ok && err == nil {
			err = fmt.Errorf("%s: %s", name, detail)
		}
	}
	for _, l := range isolation(ctx, m, im, "/usr/bin/ls") {
		layer(l.Name, l.OK, l.Detail)
	}
	ok, detail := monitorJailed(m.Pid(), e.cfg.Jail != "")
	layer("monitor jailed", ok, detail)
	_, herr := m.ReadFile(ctx, filepath.Join(hidden, "secret"), 4096)
	got, rerr := m.ReadFile(ctx, filepath.Join(ro, "granted"), 4096)
	layer("only its grants", errors.Is(herr, os.ErrNotExist) && rerr == nil && string(got) == marker,
		fmt.Sprintf("an ungranted host file: %v; a granted one: %v", herr, rerr))
	werr := m.WriteFile(ctx, filepath.Join(ro, "written"), []byte("x"), 0o644)
	_, statErr := os.Stat(filepath.Join(ro, "written"))
	layer("read-only grants", werr != nil && os.IsNotExist(statErr), fmt.Sprintf("a write into a read-only grant: %v", werr))
	werr = m.WriteFile(ctx, filepath.Join(rw, "written"), []byte(marker), 0o644)
	back, _ := os.ReadFile(filepath.Join(rw, "written"))
	layer("read-write grants", werr == nil && string(back) == marker, fmt.Sprintf("a write into a read-write grant, read back on the host: %v", werr))
	return layers, err
}

// monitor is what the host reads of a QEMU process (pid) in /proc: its
// bounding set, no_new_privs and seccomp filter count as its status
// says them, whether its mount namespace is another than this process's,
// and each of its mount points' per-mount options.
type monitor struct {
	CapBnd, NoNewPrivs, Filters string
	OwnMountNS                  bool
	Mounts                      map[string]string
}

func readMonitor(pid int) (monitor, error) {
	p := "/proc/" + strconv.Itoa(pid)
	st, err := os.ReadFile(p + "/status")
	if err != nil {
		return monitor{}, err
	}
	mi, err := os.ReadFile(p + "/mountinfo")
	if err != nil {
		return monitor{}, err
	}
	var m monitor
	for _, line := range strings.Split(string(st), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			switch v = strings.TrimSpace(v); k {
			case "CapBnd":
				m.CapBnd = v
			case "NoNewPrivs":
				m.NoNewPrivs = v
			case "Seccomp_filters":
				m.Filters = v
			}
		}
	}
	mine, _ := os.Readlink("/proc/self/ns/mnt")
	its, _ := os.Readlink(p + "/ns/mnt")
	m.OwnMountNS = its != "" && its != mine
	m.Mounts = map[string]string{}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			m.Mounts[f[4]] = f[5]
		}
	}
	return m, nil
}

// readOnly says whether per-mount options o make a mount read-only.
func readOnly(o string) bool { return o == "ro" || strings.HasPrefix(o, "ro,") }

// jailCaps is the bounding set of a jailed QEMU, as its status says it.
func jailCaps() string {
	var want uint64
	for _, c := range confine.MonitorKeeps {
		want |= 1 << c
	}
	return fmt.Sprintf("%016x", want)
}

// monitorJailed reads back from the host whether QEMU (pid) runs in the
// VM jail: only the jail's capabilities in its bounding set,
// no_new_privs, two seccomp filters (the jail's, QEMU's own), a mount
// namespace of its own whose root is read-only.
func monitorJailed(pid int, configured bool) (bool, string) {
	if !configured {
		return false, "QEMU would run as root with every capability: no jail helper is configured"
	}
	m, err := readMonitor(pid)
	if err != nil {
		return false, err.Error()
	}
	rootRO := readOnly(m.Mounts["/"])
	ok := m.CapBnd == jailCaps() && m.NoNewPrivs == "1" && m.Filters == "2" && m.OwnMountNS && rootRO
	return ok, fmt.Sprintf("QEMU (pid %d): bounding set %s (want %s), no_new_privs %s, seccomp filters %s (want 2: the jail's, QEMU's), own mount namespace %v, host root read-only %v",
		pid, m.CapBnd, jailCaps(), m.NoNewPrivs, m.Filters, m.OwnMountNS, rootRO)
}

// ProbeKey names what the probe's answer depends on, so a host keeps it
// between processes (until the machine reboots): the guest image, QEMU's
// version, the accelerator asked for, whether a KVM device is there and
// the jail helper QEMU starts through.
func (e *Executor) ProbeKey() (string, error) {
	v, err := e.version()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(e.cfg.ImageDir, boot.ManifestName))
	if err != nil {
		return "", err
	}
	_, kvm := os.Stat(e.cfg.KVM)
	return fmt.Sprintf("%s qemu %s accel %q kvm %v jail %q", addr.Of(b), v, e.cfg.Accel, kvm == nil, e.cfg.Jail), nil
}

// BootImage is the address of the default guest image's manifest, its
// files checked.
func (e *Executor) BootImage() (addr.Addr, error) {
	im, err := boot.Open(e.cfg.ImageDir)
	if err != nil {
		return addr.Addr{}, err
	}
	return im.Addr, nil
}

// isolation checks, from inside a booted guest, what every S5 guest
// must show: its own kernel (the image's release, another boot id than
// the host's) and none of the host's processes (ls is the guest's ls).
func isolation(ctx context.Context, m *Machine, im *boot.Image, ls string) []tier.Layer {
	hostBoot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	guestBoot, gerr := m.ReadFile(ctx, "/proc/sys/kernel/random/boot_id", 4096)
	var out bytes.Buffer
	st, xerr := m.Exec(ctx, wire.Command{Path: ls, Argv: []string{"ls", "/proc"}, Dir: "/"}, nil, &out, nil, time.Second)
	pids := 0
	self := false
	for _, f := range strings.Fields(out.String()) {
		if _, err := strconv.Atoi(f); err == nil {
			pids++
			self = self || (f == strconv.Itoa(os.Getpid()) && os.Getpid() > 200)
		}
	}
	return []tier.Layer{
		{Name: "own kernel", OK: gerr == nil && len(guestBoot) > 0 && !bytes.Equal(guestBoot, hostBoot) && m.Hello.Kernel == im.Manifest.Release,
			Detail: fmt.Sprintf("guest kernel %s, boot id %s (host %s)", m.Hello.Kernel, strings.TrimSpace(string(guestBoot)), strings.TrimSpace(string(hostBoot)))},
		{Name: "no host processes", OK: xerr == nil && st.Code == 0 && pids > 0 && pids < 200 && !self,
			Detail: fmt.Sprintf("%d processes in the guest's /proc, this host process (%d) not among them", pids, os.Getpid())},
	}
}
