//go:build !(linux && cgo && nvml)

package nvml

import "fmt"

// defaultLib is the library this binary was built with: none.
func defaultLib() Lib { return stubLib{} }

type stubLib struct{}

func (stubLib) Init() error {
	return fmt.Errorf("%w: this binary was built without NVML support (build with cgo and -tags nvml)", ErrNoLibrary)
}
func (stubLib) Shutdown() error                { return nil }
func (stubLib) DriverVersion() (string, error) { return "", ErrNoLibrary }
func (stubLib) Devices() ([]Device, error)     { return nil, ErrNoLibrary }
