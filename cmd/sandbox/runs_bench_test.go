package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/opensubstrate/sandbox/addr"
	"github.com/opensubstrate/sandbox/attest"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/state"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/tier"
)

// BenchmarkRunsCommand is `sandbox runs` as a user runs it (a process of
// its own, output discarded) in a state directory holding 100,000
// indexed runs: the newest 100 (the default), all of them, all as JSON;
// beside `sandbox version` (the process alone). Issue 13's goal: under
// 100 ms.
func BenchmarkRunsCommand(b *testing.B) {
	home := b.TempDir()
	d, err := state.Open(home)
	if err != nil {
		b.Fatal(err)
	}
	s := store.Of(d)
	if err := host.OpenIndex(s); err != nil {
		b.Fatal(err)
	}
	rows := make([]store.IndexedRun, 100_000)
	zero := 0
	for i := range rows {
		rows[i] = store.IndexedRun{ID: addr.Of([]byte(fmt.Sprint(i))), Started: time.Unix(1_700_000_000+int64(i), 0), Tier: tier.S2, Status: attest.Exited, Exit: &zero, Entry: "hello.wasm"}
	}
	if err := s.Index.Rebuild(rows, time.Now()); err != nil {
		b.Fatal(err)
	}
	s.Index.Close()
	for _, args := range [][]string{{"version"}, {"runs"}, {"runs", "-n", "0"}, {"runs", "--json"}} {
		b.Run(strings.Join(args, "_"), func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command(os.Args[0], append([]string{"--home", home}, args...)...)
				cmd.Env = append(os.Environ(), cliEnv+"=1")
				cmd.Stdout = io.Discard
				if err := cmd.Run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
