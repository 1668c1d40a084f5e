package audit_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/internal/audit"
	"github.com/opensubstrate/sandbox/internal/audit/audittest"
)

// TestFence: a fence record goes through the kernel's queue and comes
// back to the listener; the status shows audit enabled meanwhile.
func TestFence(t *testing.T) {
	audittest.WithEnabled(t, func() {
		st, err := audit.GetStatus()
		if err != nil || !st.Enabled {
			t.Fatalf("status %+v %v", st, err)
		}
		l, err := audit.Listen()
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := l.Fence(ctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
		if rep, overrun := l.Landlock(os.Getpid()); len(rep.Denials) != 0 || overrun || !rep.Ended {
			t.Fatalf("this process made no domain: %+v overrun %v", rep, overrun)
		}
	})
}
