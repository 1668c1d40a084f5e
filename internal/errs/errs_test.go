package errs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/opensubstrate/sandbox/device"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/reject"
	"github.com/opensubstrate/sandbox/tier"
)

func TestOf(t *testing.T) {
	_, notExist := os.Open("/nonexistent/x")
	tests := []struct {
		err  error
		want Category
	}{
		{fmt.Errorf("x: %w", reject.New(reject.Signature, "", "")), Integrity},
		{reject.New(reject.UntrustedKey, "", ""), Untrusted},
		{&grant.Denial{Kind: grant.KindNet}, Denied},
		{&tier.UnavailableError{Tier: tier.S5}, Unavailable},
		{fmt.Errorf("unit: %w", device.ErrUnavailable), Unavailable},
		{fmt.Errorf("%w: x", tier.ErrNotEscalated), Invalid},
		{&grant.Error{Grant: "x"}, Invalid},
		{Usage{errors.New("bad flag")}, Invalid},
		{notExist, NotFound},
		{context.Canceled, Canceled},
		{errors.New("boom"), Internal},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	seen := map[int]bool{}
	for c := Internal; c <= Limit; c++ {
		if seen[ExitCode(c)] {
			t.Errorf("exit code %d used twice", ExitCode(c))
		}
		seen[ExitCode(c)] = true
		_ = HTTPStatus(c)
		// Distinct, and none a code the MCP specification or its SDKs'
		// transports give a meaning of their own.
		switch m := MCPCode(c); {
		case seen[m]:
			t.Errorf("MCP code %d used twice", m)
		case m == -32001 || m == -32002 || m == -32003 || m == -32004 || m == -32005 || m == -32042 || m == -32800:
			t.Errorf("%s: MCP code %d is one the protocol's libraries use", c, m)
		}
		seen[MCPCode(c)] = true
		if c.String() == "" {
			t.Error("unnamed category")
		}
	}
}
