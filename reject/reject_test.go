package reject

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestCodesAreTheDocumentedOnes: the code table in docs/spec/conformance.md
// lists exactly Codes, in order, so a second implementation knows them all.
func TestCodesAreTheDocumentedOnes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "spec", "conformance.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Reject codes")
	if !ok {
		t.Fatal("conformance.md has no Reject codes section")
	}
	var doc []Code
	for _, line := range strings.Split(table, "\n") {
		if c, ok := strings.CutPrefix(line, "| `"); ok {
			doc = append(doc, Code(c[:strings.Index(c, "`")]))
		}
	}
	if !slices.Equal(doc, Codes) {
		t.Errorf("documented codes %v\nCodes %v", doc, Codes)
	}
	for _, c := range Codes {
		if !Known(c) {
			t.Errorf("%s not Known", c)
		}
	}
	if Known("nonsense") {
		t.Error("an unknown code is Known")
	}
}
