//go:build linux && cgo && nvml

package nvml

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// defaultLib is NVIDIA's library, loaded with dlopen at Init.
func defaultLib() Lib { return realLib{} }

type realLib struct{}

func check(r gonvml.Return) error {
	if r == gonvml.SUCCESS {
		return nil
	}
	return fmt.Errorf("%s", gonvml.ErrorString(r))
}

func (realLib) Init() error {
	r := gonvml.Init()
	if r == gonvml.ERROR_LIBRARY_NOT_FOUND {
		return fmt.Errorf("%w: libnvidia-ml.so.1 not found", ErrNoLibrary)
	}
	return check(r)
}

func (realLib) Shutdown() error { return check(gonvml.Shutdown()) }

func (realLib) DriverVersion() (string, error) {
	v, r := gonvml.SystemGetDriverVersion()
	return v, check(r)
}

func (realLib) Devices() ([]Device, error) {
	n, r := gonvml.DeviceGetCount()
	if err := check(r); err != nil {
		return nil, err
	}
	out := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		d, r := gonvml.DeviceGetHandleByIndex(i)
		if err := check(r); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		out = append(out, realDevice{d})
	}
	return out, nil
}

type realDevice struct{ d gonvml.Device }

func (x realDevice) Name() (string, error) {
	s, r := x.d.GetName()
	return s, check(r)
}

func (x realDevice) UUID() (string, error) {
	s, r := x.d.GetUUID()
	return s, check(r)
}

func (x realDevice) PowerLimit() (uint64, error) {
	mw, r := x.d.GetEnforcedPowerLimit()
	return uint64(mw), check(r)
}

func (x realDevice) TotalEnergy() (uint64, error) {
	e, r := x.d.GetTotalEnergyConsumption()
	return e, check(r)
}
