package record

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opensubstrate/sandbox/internal/crash"
)

const helperEnv = "SANDBOX_RECORD_HELPER"

// TestAppendHelper appends one segment to the record named by
// $SANDBOX_RECORD_HELPER (path and kind) when run by TestKilledAtEveryStep.
func TestAppendHelper(t *testing.T) {
	v := os.Getenv(helperEnv)
	if v == "" {
		t.Skip("run by TestKilledAtEveryStep")
	}
	var path string
	var kind Kind
	fmt.Sscanf(v, "%s %s", &path, &kind)
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	segs := map[Kind]Segment{Executed: executed("after"), Suspended: suspend(snapA), Resumed: resume(snapA, 9), Closed: {Kind: Closed}}
	if _, err := f.Append(segs[kind]); err != nil {
		t.Fatal(err)
	}
	fmt.Println("acknowledged")
}

// kill -9 at every step of an append of every kind loses nothing
// acknowledged and leaves a record that verifies: the segment is there
// whole (its line was written) or not at all.
func TestKilledAtEveryStep(t *testing.T) {
	for _, kind := range []Kind{Executed, Suspended, Resumed, Closed} {
		for _, point := range crash.LogPoints {
			t.Run(string(kind)+"/"+point, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "r.jsonl")
				f, err := Create(path, unit, grants)
				if err != nil {
					t.Fatal(err)
				}
				f.Append(executed("before"))
				if kind == Resumed {
					f.Append(suspend(snapA))
				}
				acked := f.State()
				f.Close()
				cmd := exec.Command(os.Args[0], "-test.run=^TestAppendHelper$", "-test.count=1")
				cmd.Env = append(os.Environ(), helperEnv+"="+path+" "+string(kind), crash.Env+"="+point)
				out, _ := cmd.CombinedOutput()
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("the helper was not killed at %s: %v %s", point, cmd.ProcessState, out)
				}
				f, err = Open(path)
				if err != nil {
					t.Fatalf("after kill -9 at %s: %v", point, err)
				}
				defer f.Close()
				st := f.State()
				switch st.Segments {
				case acked.Segments: // the line never reached the file
				case acked.Segments + 1:
				default:
					t.Fatalf("%d segments after the crash; %d were acknowledged", st.Segments, acked.Segments)
				}
				// It goes on: the next append works from the replayed head.
				if st.Phase != Ended {
					if _, err := f.Append(Segment{Kind: Closed}); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}
