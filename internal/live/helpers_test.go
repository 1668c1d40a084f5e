package live

import (
	"testing"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/host"
	"github.com/opensubstrate/sandbox/internal/host/hosttest"
	"github.com/opensubstrate/sandbox/internal/native"
	"github.com/opensubstrate/sandbox/internal/store"
	"github.com/opensubstrate/sandbox/key"
	"github.com/opensubstrate/sandbox/verify"
)

// newHost is the manager of a host with an S2 executor; the test's end
// closes it and removes what its sandboxes left (cleanLive).
func newHost(t *testing.T) *Manager {
	h := newBenchHost(t)
	t.Cleanup(func() { cleanLive(h) })
	return h
}

// newBenchHost is the manager of a host with an S2 executor, in a state
// directory of the test's.
func newBenchHost(t testing.TB) *Manager {
	d, k := hosttest.State(t)
	return New(&host.Host{Store: store.Of(d), Key: k, Executors: []executor.Executor{hosttest.S2(t, d, k)}})
}

func grants(t testing.TB, gs ...string) grant.Set { return hosttest.Grants(t, gs...) }

func image(t *testing.T, name string) []byte { return hosttest.Guest(t, name) }

func verifyRun(t *testing.T, h *Manager, dir string) []verify.Result {
	t.Helper()
	v := &verify.Verifier{Trust: key.NewTrust(h.Key.Public())}
	return v.Path(dir)
}

func processesWith(t *testing.T, s string) []string { return hosttest.ProcessesWith(t, s) }

// addS1 gives h an S1 executor (its probe passed) and the machine's
// cgroups.
func addS1(t testing.TB, h *Manager, name func(string) string) *native.Executor {
	ex := hosttest.S1(t, h.Store.Dir.Root, name)
	h.Executors = append(h.Executors, ex)
	h.Cgroups = hosttest.Cgroups()
	return ex
}
