package device

import (
	"errors"
	"testing"
)

func TestParseClass(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Class
	}{{"gpu", GPU}, {"GPU", GPU}, {"CPU", CPU}, {"photonic", Photonic}} {
		if got, err := ParseClass(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseClass(%q) = %q, %v", tc.in, got, err)
		}
	}
	if _, err := ParseClass("fpga"); !errors.Is(err, ErrUnknown) {
		t.Errorf("ParseClass(fpga) = %v", err)
	}
	if Class("gpu").Valid() || !GPU.Valid() || Quantum.Rank() != 7 {
		t.Error("Valid/Rank")
	}
}
