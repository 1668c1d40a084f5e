package nvml

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/meter"
)

// ErrNoLibrary is returned by Lib.Init when libnvidia-ml cannot be loaded.
var ErrNoLibrary = errors.New("no NVML library")

// Lib is the part of NVML the meter uses.
type Lib interface {
	Init() error
	Shutdown() error
	DriverVersion() (string, error)
	Devices() ([]Device, error)
}

// Device is one GPU.
type Device interface {
	Name() (string, error)
	UUID() (string, error)
	// TotalEnergy is millijoules since the driver was loaded.
	TotalEnergy() (uint64, error)
	// PowerLimit is the enforced power limit in milliwatts.
	PowerLimit() (uint64, error)
}

// Source is the GPU energy source.
type Source struct {
	Lib         Lib
	SampleEvery time.Duration

	devs   []Device
	ids    []string
	names  []string
	limits []uint64 // mW; 0 where unknown
	driver string
}

// Name implements meter.Source.
func (s *Source) Name() string { return "nvml" }

// Class implements meter.Source.
func (s *Source) Class() device.Class { return device.GPU }

// Interval implements meter.Source. NVML counters update about every 10
// ms on some systems and more slowly on others; 100 ms is safe.
func (s *Source) Interval() time.Duration {
	if s.SampleEvery > 0 {
		return s.SampleEvery
	}
	return 100 * time.Millisecond
}

// Open loads the library and finds the GPUs.
func (s *Source) Open() error {
	lib := s.Lib
	if lib == nil {
		lib = defaultLib()
		s.Lib = lib
	}
	if err := lib.Init(); err != nil {
		if errors.Is(err, ErrNoLibrary) {
			return &meter.StatusError{State: meter.NoLibrary, Detail: err.Error()}
		}
		return &meter.StatusError{State: meter.Failed, Detail: "nvmlInit: " + err.Error()}
	}
	devs, err := lib.Devices()
	if err != nil {
		return &meter.StatusError{State: meter.Failed, Detail: "listing GPUs: " + err.Error()}
	}
	if len(devs) == 0 {
		return &meter.StatusError{State: meter.Absent, Detail: "NVML found no GPU"}
	}
	s.driver, _ = lib.DriverVersion()
	for i, d := range devs {
		id, err := d.UUID()
		if err != nil {
			return &meter.StatusError{State: meter.Failed, Detail: fmt.Sprintf("GPU %d UUID: %v", i, err)}
		}
		name, _ := d.Name()
		if _, err := d.TotalEnergy(); err != nil {
			return &meter.StatusError{State: meter.Unreadable, Detail: fmt.Sprintf("GPU %d (%s) has no total-energy counter: %v", i, name, err)}
		}
		limit, _ := d.PowerLimit()
		s.devs = append(s.devs, d)
		s.ids = append(s.ids, id)
		s.names = append(s.names, name)
		s.limits = append(s.limits, limit)
	}
	return nil
}

// Rails implements meter.Source: one per GPU, by UUID.
func (s *Source) Rails() []string { return append([]string{}, s.ids...) }

// Read implements meter.Source, in µJ.
func (s *Source) Read() ([]uint64, error) {
	out := make([]uint64, len(s.devs))
	for i, d := range s.devs {
		mj, err := d.TotalEnergy()
		if err != nil {
			return nil, fmt.Errorf("GPU %s: %w", s.ids[i], err)
		}
		out[i] = mj * 1000
	}
	return out, nil
}

// Delta implements meter.Source: a 64-bit mJ counter does not wrap, so a
// drop is a driver reload.
func (s *Source) Delta(prev, cur []uint64) ([]uint64, error) {
	out := make([]uint64, len(cur))
	for i := range cur {
		if cur[i] < prev[i] {
			return nil, fmt.Errorf("GPU %s: %w: the energy counter went from %d to %d µJ (a driver reload)", s.ids[i], meter.ErrReset, prev[i], cur[i])
		}
		out[i] = cur[i] - prev[i]
	}
	return out, nil
}

// RatedPower implements meter.Rated: the GPUs' enforced power limits,
// summed (a unit asks for the class, not one GPU), for the estimator.
func (s *Source) RatedPower() (uint64, string, bool) {
	var sum uint64
	for _, l := range s.limits {
		if l == 0 {
			return 0, "", false
		}
		sum += l
	}
	if len(s.limits) == 0 {
		return 0, "", false
	}
	return sum, fmt.Sprintf("NVML enforced power limit of %d GPU(s) (%s)", len(s.limits), strings.Join(s.ids, ", ")), true
}

// Devices returns each GPU's identity, as the attestation records it;
// valid after a successful Open.
func (s *Source) Devices() []attest.Device {
	out := make([]attest.Device, len(s.ids))
	for i := range s.ids {
		out[i] = attest.Device{Class: device.GPU, Model: s.names[i], Driver: "nvidia " + s.driver, ID: s.ids[i]}
	}
	return out
}
