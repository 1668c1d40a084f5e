package reject

import (
	"errors"
	"fmt"
	"testing"
)

func TestIsAndCodeOf(t *testing.T) {
	err := fmt.Errorf("verify: %w", New(Signature, "claim", "bad"))
	if !errors.Is(err, Signature) {
		t.Fatal("errors.Is(Signature) = false")
	}
	if errors.Is(err, UntrustedKey) {
		t.Fatal("errors.Is(UntrustedKey) = true")
	}
	if CodeOf(err) != Signature || CodeOf(errors.New("x")) != "" {
		t.Fatal("CodeOf")
	}
	if got, want := err.Error(), "verify: signature: claim: bad"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestIn(t *testing.T) {
	e := In("receipt.cose", New(Truncated, "offset 3", "end of input"))
	if got, want := e.Error(), "truncated: receipt.cose: offset 3: end of input"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	e = In("f", New(Truncated, "", "x"))
	if got, want := e.Error(), "truncated: f: x"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	plain := errors.New("plain")
	if In("f", plain) != plain {
		t.Fatal("In changed a plain error")
	}
}
