package nvidia

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrNoDevice is wrapped by Discover's error where the host has no usable
// NVIDIA GPU.
var ErrNoDevice = errors.New("no NVIDIA GPU")

// Major is the character major NVIDIA's GPU and control nodes are
// registered under (/dev/nvidia0.., /dev/nvidiactl = 195:255,
// /dev/nvidia-modeset = 195:254). nvidia-uvm's is dynamic.
const Major = 195

// Node is one character device node.
type Node struct {
	// Path is where the node is in a run (and on a host whose root is "/").
	Path string
	// Host is where it was found (the root joined with Path).
	Host         string
	Major, Minor uint32
}

// GPU is one GPU as the driver reports it.
type GPU struct {
	Model string
	UUID  string
	Bus   string // PCI bus location, "0000:18:00.0"
	Node  Node   // its /dev/nvidiaN, by the driver's device minor
}

// Host is what the driver offers on a host: its GPUs, the nodes every
// user of a GPU needs besides the GPU's own, and the user-space libraries.
type Host struct {
	Driver string // the kernel module's version, "550.54.15"
	GPUs   []GPU
	// Control are /dev/nvidiactl and, where they exist, /dev/nvidia-uvm,
	// /dev/nvidia-uvm-tools and /dev/nvidia-modeset.
	Control []Node
	// Libs are the driver's libraries, as paths beneath the root (a
	// library's symlinks are listed too, each with its own path).
	Libs []Lib
}

// Lib is one library file or link.
type Lib struct {
	Path string // beneath the root: "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	Host string // the root joined with Path
}

// Nodes are every node a run given all the host's GPUs needs.
func (h *Host) Nodes() []Node {
	out := append([]Node{}, h.Control...)
	for _, g := range h.GPUs {
		out = append(out, g.Node)
	}
	return out
}

// control are the nodes besides the GPUs', the first required.
var control = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}

// LibPatterns are the driver's user-space libraries a CUDA or NVML
// program loads (the names NVIDIA's container toolkit mounts for the
// compute and utility capabilities).
var LibPatterns = []string{
	"libcuda.so*", "libcudadebugger.so*", "libnvidia-ml.so*", "libnvidia-ptxjitcompiler.so*",
	"libnvidia-nvvm.so*", "libnvidia-opencl.so*", "libnvidia-cfg.so*", "libnvidia-gpucomp.so*",
	"libnvidia-allocator.so*", "libnvidia-pkcs11*.so*",
}

// DefaultLibDirs are searched besides those ldconfig is configured with.
var DefaultLibDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64"}

var gpuNode = regexp.MustCompile(`^nvidia[0-9]+$`)

// Discover finds the NVIDIA driver, GPUs and libraries beneath root.
func Discover(root string) (*Host, error) {
	h := &Host{}
	ctl, err := stat(root, control[0])
	if err != nil {
		return nil, fmt.Errorf("%w: no %s: no NVIDIA driver on this host (%v)", ErrNoDevice, control[0], err)
	}
	h.Control = append(h.Control, ctl)
	for _, p := range control[1:] {
		if n, err := stat(root, p); err == nil {
			h.Control = append(h.Control, n)
		}
	}
	v, err := os.ReadFile(filepath.Join(root, "proc/driver/nvidia/version"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s is there but the driver's /proc/driver/nvidia/version cannot be read: %v", ErrNoDevice, control[0], err)
	}
	if h.Driver = ParseVersion(string(v)); h.Driver == "" {
		return nil, fmt.Errorf("%w: /proc/driver/nvidia/version names no version: %q", ErrNoDevice, firstLine(string(v)))
	}
	byMinor := map[uint32]Node{}
	ents, _ := os.ReadDir(filepath.Join(root, "dev"))
	for _, e := range ents {
		if gpuNode.MatchString(e.Name()) {
			if n, err := stat(root, "/dev/"+e.Name()); err == nil {
				byMinor[n.Minor] = n
			}
		}
	}
	infos, _ := filepath.Glob(filepath.Join(root, "proc/driver/nvidia/gpus/*/information"))
	sort.Strings(infos)
	for _, p := range infos {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		g, minor, err := ParseInformation(string(b))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNoDevice, strings.TrimPrefix(p, root), err)
		}
		if g.Bus == "" {
			g.Bus = filepath.Base(filepath.Dir(p))
		}
		n, ok := byMinor[minor]
		if !ok {
			return nil, fmt.Errorf("%w: the driver reports GPU %s (%s) at device minor %d, but there is no /dev/nvidia%d (a character device %d:%d)", ErrNoDevice, g.UUID, g.Model, minor, minor, Major, minor)
		}
		g.Node = n
		h.GPUs = append(h.GPUs, g)
	}
	if len(h.GPUs) == 0 {
		return nil, fmt.Errorf("%w: the NVIDIA driver %s is loaded, but it reports no GPU under /proc/driver/nvidia/gpus", ErrNoDevice, h.Driver)
	}
	h.Libs = libs(root)
	return h, nil
}

func stat(root, p string) (Node, error) {
	host := filepath.Join(root, p)
	fi, err := os.Stat(host)
	if err != nil {
		return Node{}, err
	}
	st, ok := sysStat(fi)
	if !ok || fi.Mode()&os.ModeCharDevice == 0 {
		return Node{}, fmt.Errorf("%s is not a character device", p)
	}
	return Node{Path: p, Host: host, Major: st.major, Minor: st.minor}, nil
}

// ParseVersion finds the kernel module's version in
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel
// Module  550.54.15  Thu ..."): the first word of its first line that is
// made of numbers and dots; "" if there is none.
func ParseVersion(s string) string {
	for _, w := range strings.Fields(firstLine(s)) {
		if versionWord.MatchString(w) {
			return w
		}
	}
	return ""
}

var versionWord = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)*$`)

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// ParseInformation reads one GPU's /proc/driver/nvidia/gpus/BUS/information
// ("Model: \t NVIDIA H100", "GPU UUID: \t GPU-…", "Bus Location: …",
// "Device Minor: \t 0"): the GPU and its device minor. The model, the UUID
// and the minor are required.
func ParseInformation(s string) (GPU, uint32, error) {
	var g GPU
	minor := int64(-1)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "Model":
			g.Model = v
		case "GPU UUID":
			g.UUID = v
		case "Bus Location":
			g.Bus = v
		case "Device Minor":
			m, err := strconv.ParseInt(v, 10, 32)
			if err != nil || m < 0 || m > 254 {
				return g, 0, fmt.Errorf("device minor %q is not a number from 0 to 254", v)
			}
			minor = m
		}
	}
	switch {
	case g.Model == "":
		return g, 0, errors.New("no Model line")
	case g.UUID == "":
		return g, 0, errors.New("no GPU UUID line")
	case minor < 0:
		return g, 0, errors.New("no Device Minor line")
	}
	return g, uint32(minor), nil
}

// LibDirs are the directories searched for the driver's libraries beneath
// root: those named in /etc/ld.so.conf and the files of
// /etc/ld.so.conf.d, then DefaultLibDirs.
func LibDirs(root string) []string {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if filepath.IsAbs(d) && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	confs := []string{filepath.Join(root, "etc/ld.so.conf")}
	more, _ := filepath.Glob(filepath.Join(root, "etc/ld.so.conf.d/*.conf"))
	sort.Strings(more)
	confs = append(confs, more...)
	for _, c := range confs {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			l, _, _ = strings.Cut(l, "#")
			l = strings.TrimSpace(l)
			if l != "" && !strings.HasPrefix(l, "include") {
				add(l)
			}
		}
	}
	for _, d := range DefaultLibDirs {
		add(d)
	}
	return dirs
}

// libs lists the driver's libraries in LibDirs, each file once by its
// real path beneath root (a directory reached twice through a link, as
// /lib → usr/lib, is listed once).
func libs(root string) []Lib {
	var out []Lib
	seen := map[string]bool{}
	for _, d := range LibDirs(root) {
		real, err := filepath.EvalSymlinks(filepath.Join(root, d))
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		for _, pat := range LibPatterns {
			ms, _ := filepath.Glob(filepath.Join(root, d, pat))
			sort.Strings(ms)
			for _, m := range ms {
				fi, err := os.Lstat(m)
				if err != nil || !(fi.Mode().IsRegular() || fi.Mode()&os.ModeSymlink != 0) {
					continue
				}
				out = append(out, Lib{Path: filepath.Join(d, filepath.Base(m)), Host: m})
			}
		}
	}
	return out
}
