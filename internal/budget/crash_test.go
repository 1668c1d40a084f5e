package budget

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/internal/crash"
	"github.com/opensubstrate/sandbox/jcp"
	"github.com/opensubstrate/sandbox/reject"
)

const helperEnv = "SANDBOX_BUDGET_HELPER"

// The helper's one change: reserve 3 J at the child for crashInv, or
// post 4 J against reservation 1.
var crashInv = addr.Of([]byte("the crashed invocation"))

// TestCrashHelper makes one change to the ledger at $SANDBOX_BUDGET_HELPER
// ("reserve PATH" or "post PATH") when run by TestKilled.
func TestCrashHelper(t *testing.T) {
	op, path, ok := strings.Cut(os.Getenv(helperEnv), " ")
	if !ok {
		t.Skip("run by TestKilled")
	}
	l, err := Open(path, trust(t), host(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	tree := l.Tree()
	switch op {
	case "reserve":
		_, err = l.Reserve(Reservation{Path: []addr.Addr{tree[1].Grant, tree[0].Grant}, UJ: cpu(3 * J), Invocation: crashInv})
	case "post":
		err = l.Post(1, cpu(4*J), addr.Of([]byte("run")))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// kill -9 between a change's decision and its append, in the append,
// and after it before the caller is answered: the ledger opens and
// verifies, and the change is there whole (appended) or not at all
// (decided only), counted once.
func TestKilled(t *testing.T) {
	points := append([]string{crash.BudgetDecided}, append(crash.LogPoints, crash.BudgetAppended)...)
	for _, op := range []string{"reserve", "post"} {
		for _, point := range points {
			t.Run(op+"@"+point, func(t *testing.T) {
				appended := point != crash.BudgetDecided
				path := filepath.Join(t.TempDir(), "ledger.jsonl")
				tr := crashSetup(t, path, op == "post")
				kill(t, path, op, point)
				l, err := Open(path, trust(t), host(t), time.Now)
				if err != nil {
					t.Fatalf("after kill -9 at %s: %v", point, err)
				}
				defer closeAndVerify(t, l, path)
				c, out := cpuOf(budgetOf(t, l, tr.c)), l.Outstanding()
				switch {
				case op == "reserve" && appended:
					if len(out) != 1 || out[0].Invocation != crashInv || c.Reserved != 3*J {
						t.Fatalf("an appended reservation is not outstanding once: %+v %+v", out, c)
					}
					_, err := l.Reserve(Reservation{Path: path2(tr), UJ: cpu(J), Invocation: crashInv})
					refused(t, "the crashed invocation again", err, reject.Replay, "inv")
				case op == "reserve":
					if len(out) != 0 || c.Reserved != 0 {
						t.Fatalf("a reservation never appended is there: %+v %+v", out, c)
					}
					if n, err := l.Reserve(Reservation{Path: path2(tr), UJ: cpu(J), Invocation: crashInv}); err != nil || n != 1 {
						t.Fatalf("the invocation after its reservation was lost: %d %v", n, err)
					}
				case appended:
					if len(out) != 0 || c.Reserved != 0 || c.Spent != 4*J {
						t.Fatalf("an appended post is not there once: %+v %+v", out, c)
					}
					refused(t, "post again", l.Post(1, cpu(4*J), addr.Of([]byte("run"))), reject.DoubleSpend, "n")
				default:
					if len(out) != 1 || c.Reserved != 2*J || c.Spent != 0 {
						t.Fatalf("a post never appended counts: %+v %+v", out, c)
					}
					refused(t, "post again", l.Post(1, cpu(4*J), addr.Of([]byte("run"))), "", "")
				}
			})
		}
	}
}

func path2(tr tree) []addr.Addr { return path(tr.c, tr.r) }

// crashSetup admits a tree, reserves 2 J at the child if it is to be
// posted, and closes the ledger (signing its head).
func crashSetup(t *testing.T, path string, reserved bool) tree {
	l, err := Open(path, trust(t), host(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(t, 100*J, 50*J, 20*J, jcp.Caveats{})
	if err := l.Admit(tr.tokens()...); err != nil {
		t.Fatal(err)
	}
	if reserved {
		if _, err := l.Reserve(Reservation{Path: path2(tr), UJ: cpu(2 * J), Invocation: inv()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return tr
}

// kill runs the helper's op, killed at point.
func kill(t *testing.T, path, op, point string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+op+" "+path, crash.Env+"="+point)
	out, _ := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the helper was not killed at %s: %v %s", point, cmd.ProcessState, out)
	}
}
