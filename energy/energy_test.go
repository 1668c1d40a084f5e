package energy

import (
	"errors"
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Microjoules
		ok   bool
	}{
		{"5J", 5 * Joule, true},
		{"5 J", 5 * Joule, true},
		{"250mJ", 250 * Millijoule, true},
		{"1.5kJ", 1500 * Joule, true},
		{"2Wh", 7200 * Joule, true},
		{"1kWh", 3600 * Kilojoule, true},
		{"7uJ", 7, true},
		{"7µJ", 7, true},
		{"0.000001J", 1, true},
		{"0J", 0, true},
		{".5J", 500 * Millijoule, true},
		{"3.MJ", 3 * Megajoule, true},
		{"18446744073709551615uJ", math.MaxUint64, true},
		{"18446744073709551616uJ", 0, false},
		{"18446744073709.551615J", math.MaxUint64, true},
		{"20000000000000J", 0, false},
		{"0.0000001J", 0, false},
		{"1.5uJ", 0, false},
		{"5", 0, false},
		{"J", 0, false},
		{"-5J", 0, false},
		{"5j", 0, false},
		{"5 joules", 0, false},
		{"1e3J", 0, false},
		{"0.00000000000000000000001J", 0, false},
	}
	for _, tc := range tests {
		got, err := Parse(tc.in)
		if tc.ok {
			if err != nil || got != tc.want {
				t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %d, %v; want ErrSyntax", tc.in, got, err)
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   Microjoules
		want string
	}{
		{0, "0 J"},
		{850, "850 µJ"},
		{12500, "12.5 mJ"},
		{3200001, "3.200001 J"},
		{5 * Joule, "5 J"},
		{math.MaxUint64, "18446744073709.551615 J"},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%d.String() = %q, want %q", uint64(tc.in), got, tc.want)
		}
		if back, err := Parse(tc.in.String()); err != nil || back != tc.in {
			t.Errorf("Parse(%q) = %d, %v", tc.in.String(), back, err)
		}
	}
}

func TestSum(t *testing.T) {
	if s, err := Sum(1, 2, 3); err != nil || s != 6 {
		t.Fatal(s, err)
	}
	if _, err := Sum(math.MaxUint64, 1); err == nil {
		t.Fatal("overflow not reported")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"5J", "1.5kJ", "0.000001J", "2Wh", "18446744073709551615uJ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		back, err := Parse(v.String())
		if err != nil || back != v {
			t.Fatalf("Parse(%q) = %d, whose String %q reads back as %d, %v", s, v, v.String(), back, err)
		}
	})
}
