package energy

import (
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
)

// Microjoules is an amount of energy in integer microjoules.
type Microjoules uint64

// Units.
const (
	Microjoule   Microjoules = 1
	Millijoule               = 1000 * Microjoule
	Joule                    = 1000 * Millijoule
	Kilojoule                = 1000 * Joule
	Megajoule                = 1000 * Kilojoule
	WattHour                 = 3600 * Joule
	KilowattHour             = 1000 * WattHour
)

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("malformed energy")

var units = []struct {
	name string
	v    Microjoules
}{
	// Longest names first, so "kWh" is not read as "k" + "Wh" and "mJ" not as "J".
	{"kWh", KilowattHour}, {"Wh", WattHour},
	{"uJ", Microjoule}, {"µJ", Microjoule}, {"mJ", Millijoule}, {"kJ", Kilojoule}, {"MJ", Megajoule},
	{"J", Joule},
}

// Parse reads a decimal amount followed by a unit: uJ (or µJ), mJ, J, kJ,
// MJ, Wh, kWh. Spaces between the number and the unit are allowed. The
// result must be a whole number of microjoules and fit in 64 bits.
func Parse(s string) (Microjoules, error) {
	in := strings.TrimSpace(s)
	for _, u := range units {
		num, ok := strings.CutSuffix(in, u.name)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		v, err := scale(num, u.v)
		if err != nil {
			return 0, fmt.Errorf("%w: %q: %v", ErrSyntax, s, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("%w: %q: want a number and a unit (uJ, mJ, J, kJ, MJ, Wh, kWh), e.g. 5J", ErrSyntax, s)
}

// scale computes num*unit exactly for a decimal num such as "1.25".
func scale(num string, unit Microjoules) (Microjoules, error) {
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) || len(num) > 64 {
		return 0, fmt.Errorf("%q is not a decimal number", num)
	}
	r, ok := new(big.Rat).SetString(whole + "." + frac + "0")
	if !ok {
		return 0, fmt.Errorf("%q is not a decimal number", num)
	}
	r.Mul(r, new(big.Rat).SetUint64(uint64(unit)))
	if !r.IsInt() {
		return 0, errors.New("finer than one microjoule")
	}
	if !r.Num().IsUint64() {
		return 0, errors.New("too large")
	}
	return Microjoules(r.Num().Uint64()), nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String formats e for people: "0 J", "850 µJ", "12.5 mJ", "3.200001 J".
// The text is exact; Parse reads it back to the same value.
func (e Microjoules) String() string {
	switch {
	case e == 0:
		return "0 J"
	case e < Millijoule:
		return strconv.FormatUint(uint64(e), 10) + " µJ"
	case e < Joule:
		return decimal(uint64(e), 3) + " mJ"
	default:
		return decimal(uint64(e), 6) + " J"
	}
}

// decimal writes v / 10^places without trailing zeros.
func decimal(v uint64, places int) string {
	s := strconv.FormatUint(v, 10)
	for len(s) <= places {
		s = "0" + s
	}
	w, f := s[:len(s)-places], strings.TrimRight(s[len(s)-places:], "0")
	if f == "" {
		return w
	}
	return w + "." + f
}

// Add returns a+b, or an error if the sum overflows.
func Add(a, b Microjoules) (Microjoules, error) {
	s, c := bits.Add64(uint64(a), uint64(b), 0)
	if c != 0 {
		return 0, errors.New("energy: sum overflows 64 bits")
	}
	return Microjoules(s), nil
}

// Sum returns the sum of vs, or an error if it overflows.
func Sum(vs ...Microjoules) (Microjoules, error) {
	var t Microjoules
	for _, v := range vs {
		var err error
		if t, err = Add(t, v); err != nil {
			return 0, err
		}
	}
	return t, nil
}
