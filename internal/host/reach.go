package host

import (
	"os"

	"github.com/opensubstrate/sandbox/internal/executor"
	"github.com/opensubstrate/sandbox/internal/grant"
	"github.com/opensubstrate/sandbox/internal/hostpath"
)

// guard is what no storage grant of this host may reach, at any tier:
// the state directory, and sandbox's binaries (its own and its
// executors' helpers) writable. Made once, from the executors the host
// has then.
func (h *Host) guard() (hostpath.Guard, error) {
	h.guardOnce.Do(func() {
		exe, _ := os.Executable()
		bins := []string{exe}
		for _, e := range h.Executors {
			if x, ok := e.(executor.Helpers); ok {
				bins = append(bins, x.Helpers()...)
			}
		}
		h.guardVal, h.guardErr = hostpath.NewGuard(h.Store.Root(), bins...)
	})
	return h.guardVal, h.guardErr
}

// ReachGrants is the check every run and every sandbox passes before any
// executor sees it, whatever its tier (S0, which confines nothing, and
// executors that share no directories included): each storage grant's
// path (at remap's, where it names one) is walked without following a
// link and checked against the host's guard (grant.Reach). Executors
// then reach each grant again the same way when they use it, and use
// the object they reached, never the path.
func (h *Host) ReachGrants(storage []grant.Storage, remap map[string]string) error {
	if len(storage) == 0 {
		return nil
	}
	g, err := h.guard()
	if err != nil {
		return err
	}
	return grant.ReachAll(g, storage, remap)
}
