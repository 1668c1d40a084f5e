package device

import (
	"errors"
	"fmt"
	"strings"
)

// Class is a compute device class. The zero value is not a class.
type Class string

// The classes, in canonical order.
const (
	CPU      Class = "Cpu"
	SIMD     Class = "Simd"
	GPU      Class = "Gpu"
	NPU      Class = "Npu"
	TPU      Class = "Tpu"
	LPU      Class = "Lpu"
	Photonic Class = "Photonic"
	Quantum  Class = "Quantum"
)

// Classes lists every class in canonical order.
var Classes = []Class{CPU, SIMD, GPU, NPU, TPU, LPU, Photonic, Quantum}

// ErrUnknown is wrapped by ParseClass's error.
var ErrUnknown = errors.New("unknown device class")

// ErrUnavailable is wrapped by the error for a unit that asks for a
// device class the executor chosen for it cannot give it.
var ErrUnavailable error = unavailable{}

type unavailable struct{}

func (unavailable) Error() string { return "device class unavailable" }

// Category names its category in the one map (internal/errs).
func (unavailable) Category() string { return "unavailable" }

// ParseClass reads a class name in any letter case.
func ParseClass(s string) (Class, error) {
	for _, c := range Classes {
		if strings.EqualFold(s, string(c)) {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrUnknown, s, names())
}

// Valid reports whether c is one of the classes, spelled canonically.
func (c Class) Valid() bool { return c.Rank() >= 0 }

// Rank returns c's position in the canonical order, or -1 if c is not a
// canonically spelled class.
func (c Class) Rank() int {
	for i, k := range Classes {
		if c == k {
			return i
		}
	}
	return -1
}

func names() string {
	s := make([]string, len(Classes))
	for i, c := range Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}
