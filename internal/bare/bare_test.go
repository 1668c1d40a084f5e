package bare

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/unit"
)

// TestStartFailures: a program that is not there, or not executable,
// ends as failed with the errno a shell would map to 127 or 126.
func TestStartFailures(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("not a program\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entry string
		errno syscall.Errno
	}{{"/no/such/program", syscall.ENOENT}, {plain, syscall.EACCES}} {
		res, err := Executor{}.Run(context.Background(), &executor.Job{Unit: unit.Unit{Entry: tc.entry}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome.Status != attest.Failed || res.ExecErrno != tc.errno {
			t.Errorf("%s: %+v, errno %v", tc.entry, res.Outcome, res.ExecErrno)
		}
	}
}
