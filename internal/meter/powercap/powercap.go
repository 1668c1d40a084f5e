package powercap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/meter"
)

// Source reads package (or dram) energy from a powercap tree.
type Source struct {
	// Root is the sysfs root ("/sys"); zones are under Root/class/powercap.
	Root string
	// DRAM selects the dram zones instead of the package zones: dram is its
	// own line, never part of package.
	DRAM bool
	// ReadFile reads a sysfs file; os.ReadFile in production.
	ReadFile func(string) ([]byte, error)
	// SampleEvery is the liveness interval (default 60 ms).
	SampleEvery time.Duration

	zones  []zone // the package zones summed
	dram   []zone
	psys   bool
	mirror map[int][]zone // candidate mirrors, by package number, decided in Dedupe
	notes  []string
}

type zone struct {
	dir   string
	ctype string // control type: intel-rapl, intel-rapl-mmio, ...
	name  string // package-0, package-0-die-1, dram, psys, ...
	pkg   int
	max   uint64
}

// Name implements meter.Source.
func (s *Source) Name() string {
	if s.DRAM {
		return "powercap-dram"
	}
	return "powercap"
}

// Class implements meter.Source.
func (s *Source) Class() device.Class { return device.CPU }

// Interval implements meter.Source.
func (s *Source) Interval() time.Duration {
	if s.SampleEvery > 0 {
		return s.SampleEvery
	}
	return 60 * time.Millisecond
}

func (s *Source) read(p string) ([]byte, error) {
	if s.ReadFile != nil {
		return s.ReadFile(p)
	}
	return os.ReadFile(p)
}

var (
	zoneDir  = regexp.MustCompile(`^([a-z0-9-]+)((?::[0-9a-f]+)+)$`)
	pkgName  = regexp.MustCompile(`^package-([0-9]+)(?:-die-([0-9]+))?$`)
	dramName = regexp.MustCompile(`^dram$`)
)

// Open finds the zones.
func (s *Source) Open() error {
	base := filepath.Join(s.Root, "class", "powercap")
	ents, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return &meter.StatusError{State: meter.Absent, Detail: fmt.Sprintf("no %s (no RAPL/powercap on this host, usual in VMs)", base)}
	}
	if err != nil {
		return &meter.StatusError{State: meter.Unreadable, Detail: err.Error()}
	}
	var all []zone
	for _, e := range ents {
		m := zoneDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue // a control type directory, or something else
		}
		dir := filepath.Join(base, e.Name())
		nb, err := s.read(filepath.Join(dir, "name"))
		if err != nil {
			continue
		}
		z := zone{dir: dir, ctype: m[1], name: strings.TrimSpace(string(nb)), pkg: -1}
		depth := strings.Count(m[2], ":")
		if pm := pkgName.FindStringSubmatch(z.name); pm != nil && depth == 1 {
			z.pkg, _ = strconv.Atoi(pm[1])
		}
		if z.name == "psys" {
			s.psys = true
			continue
		}
		if z.pkg < 0 && !(dramName.MatchString(z.name)) {
			continue // core, uncore: inside package
		}
		mb, err := s.read(filepath.Join(dir, "max_energy_range_uj"))
		if err != nil {
			return &meter.StatusError{State: meter.Unreadable, Detail: fmt.Sprintf("%s: %v", filepath.Join(dir, "max_energy_range_uj"), err)}
		}
		z.max, err = strconv.ParseUint(strings.TrimSpace(string(mb)), 10, 64)
		if err != nil || z.max == 0 {
			return &meter.StatusError{State: meter.Failed, Detail: fmt.Sprintf("%s: bad max_energy_range_uj %q", dir, mb)}
		}
		all = append(all, z)
	}
	// One copy per package name: prefer the intel-rapl control type.
	byName := map[string]zone{}
	for _, z := range all {
		if z.pkg < 0 {
			continue
		}
		key := z.name
		if prev, ok := byName[key]; ok {
			if prev.ctype == "intel-rapl" {
				s.notes = append(s.notes, fmt.Sprintf("%s via %s is a duplicate of %s via intel-rapl", z.name, z.ctype, z.name))
				continue
			}
			if z.ctype != "intel-rapl" {
				continue
			}
			s.notes = append(s.notes, fmt.Sprintf("%s via %s is a duplicate of %s via intel-rapl", prev.name, prev.ctype, z.name))
		}
		byName[key] = z
	}
	for _, z := range byName {
		s.zones = append(s.zones, z)
	}
	sort.Slice(s.zones, func(i, j int) bool { return s.zones[i].name < s.zones[j].name })
	for _, z := range all {
		if z.pkg < 0 && z.ctype == "intel-rapl" {
			s.dram = append(s.dram, z)
		}
	}
	if s.DRAM {
		s.zones, s.dram = s.dram, nil
		if len(s.zones) == 0 {
			return &meter.StatusError{State: meter.Absent, Detail: fmt.Sprintf("%s has no dram zone", base)}
		}
	}
	if len(s.zones) == 0 {
		return &meter.StatusError{State: meter.Absent, Detail: fmt.Sprintf("%s has no package zone", base)}
	}
	// Probe readability now: zones that exist may still be root-only.
	for _, z := range s.zones {
		p := filepath.Join(z.dir, "energy_uj")
		if _, err := s.read(p); err != nil {
			detail := fmt.Sprintf("%s: %v", p, err)
			if errors.Is(err, fs.ErrPermission) {
				detail = fmt.Sprintf("%s is root-only (mode 0400 since Linux 5.10, CVE-2020-8694) and this process cannot read it", p)
			}
			return &meter.StatusError{State: meter.Unreadable, Detail: detail}
		}
	}
	return nil
}

// Rails implements meter.Source: the zones summed, named by their name
// file and, for dram, their directory.
func (s *Source) Rails() []string {
	out := make([]string, len(s.zones))
	for i, z := range s.zones {
		out[i] = z.name
		if s.DRAM {
			out[i] = filepath.Base(z.dir)
		}
	}
	return out
}

// Read implements meter.Source.
func (s *Source) Read() ([]uint64, error) {
	out := make([]uint64, len(s.zones))
	for i, z := range s.zones {
		v, err := s.readCounter(z)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (s *Source) readCounter(z zone) (uint64, error) {
	p := filepath.Join(z.dir, "energy_uj")
	b, err := s.read(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a counter", p, b)
	}
	if v > z.max {
		return 0, fmt.Errorf("%s: %d is above max_energy_range_uj %d", p, v, z.max)
	}
	return v, nil
}

// Delta implements meter.Source: per zone, wrapping at that zone's range.
func (s *Source) Delta(prev, cur []uint64) ([]uint64, error) {
	if len(prev) != len(s.zones) || len(cur) != len(s.zones) {
		return nil, fmt.Errorf("powercap: %d and %d readings for %d zones", len(prev), len(cur), len(s.zones))
	}
	out := make([]uint64, len(cur))
	for i := range cur {
		out[i] = wrapDelta(prev[i], cur[i], s.zones[i].max)
	}
	return out, nil
}

// wrapDelta is cur-prev, or the distance across one wrap at max.
func wrapDelta(prev, cur, max uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	return max - prev + cur
}

// Dedupe drops zones of one package whose counters are mirrors of each
// other: across every sample they advanced by the same delta (within one
// µJ). samples are consecutive Read results taken while the CPU was busy.
// It returns the indexes of the zones kept.
func (s *Source) Dedupe(samples [][]uint64) []int {
	all := make([]int, len(s.zones))
	for i := range all {
		all[i] = i
	}
	if len(samples) < 3 || s.DRAM {
		return all
	}
	n := len(s.zones)
	deltas := make([][]uint64, n)
	for k := 1; k < len(samples); k++ {
		d, err := s.Delta(samples[k-1], samples[k])
		if err != nil {
			return all
		}
		for i := range d {
			deltas[i] = append(deltas[i], d[i])
		}
	}
	drop := make([]bool, n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if drop[j] || s.zones[i].pkg != s.zones[j].pkg {
				continue
			}
			same, moved := true, false
			for k := range deltas[i] {
				a, b := deltas[i][k], deltas[j][k]
				if a > b+1 || b > a+1 {
					same = false
					break
				}
				moved = moved || a > 0
			}
			if same && moved {
				drop[j] = true
				s.notes = append(s.notes, fmt.Sprintf("%s mirrors %s (identical deltas): counted once", s.zones[j].name, s.zones[i].name))
			}
		}
	}
	var keep []zone
	var idx []int
	for i, z := range s.zones {
		if !drop[i] {
			keep = append(keep, z)
			idx = append(idx, i)
		}
	}
	s.zones = keep
	return idx
}

// Notes says what Open and Dedupe decided (duplicates, mirrors, psys).
func (s *Source) Notes() []string {
	out := append([]string{}, s.notes...)
	if s.psys {
		out = append(out, "psys present: never added to package")
	}
	for _, d := range s.dram {
		out = append(out, "dram zone "+filepath.Base(d.dir)+" reported on its own line, not in package")
	}
	return out
}
