package audittest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opensubstrate/sandbox/internal/audit"
)

// Lock holds the host-wide audit test lock until the test ends, so that
// what the test reads of audit's state stays as it found it.
func Lock(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sandbox-audit-test.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// WithEnabled runs f with audit enabled. It skips where the test cannot
// read or set audit: not root, or no CAP_AUDIT_CONTROL (some containers).
func WithEnabled(t testing.TB, f func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("audit is read and set as root (euid %d)", os.Geteuid())
	}
	Lock(t)
	st, err := audit.GetStatus()
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Skipf("no access to the kernel's audit here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !st.Enabled {
		if err := audit.SetEnabled(true); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := audit.SetEnabled(false); err != nil {
				t.Errorf("audit left on: %v", err)
			}
		}()
	}
	f()
}
