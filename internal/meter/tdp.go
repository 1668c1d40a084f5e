package meter

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opensubstrate/sandbox/device"
)

// knownTDP maps CPU model substrings to the package's rated power in watts
// and its hardware threads, for the Estimator. The list is short on
// purpose: an unknown model gets an assumption that says it is one.
var knownTDP = []struct {
	model   string
	watts   uint64
	threads uint64
}{
	{"EPYC 7B13", 240, 128}, {"EPYC 7763", 280, 128}, {"EPYC 9654", 360, 192}, {"EPYC 7R13", 240, 96},
	{"Xeon(R) Platinum 8488C", 350, 96}, {"Xeon(R) Platinum 8375C", 300, 64}, {"Xeon(R) Platinum 8259CL", 210, 48},
	{"Core(TM) i7-1185G7", 28, 8},
}

// AssumedWattsPerCPU is the Estimator's assumption for a CPU model it does
// not know: 4 W per logical CPU (a server core at load, roughly).
const AssumedWattsPerCPU = 4

// DetectTDP returns the Cpu class's rated power for a model and CPU count:
// the package's TDP per hardware thread, times the CPUs this host sees (a
// VM sees a share of a package).
func DetectTDP(model string, ncpu int) TDP {
	if ncpu <= 0 {
		ncpu = 1
	}
	for _, k := range knownTDP {
		if strings.Contains(model, k.model) {
			mw := k.watts * 1000 * uint64(ncpu) / k.threads
			return TDP{MilliWatts: mw, Origin: fmt.Sprintf("detected: the %q package's %d W TDP over its %d threads, × %d CPUs seen", model, k.watts, k.threads, ncpu)}
		}
	}
	return TDP{MilliWatts: uint64(ncpu) * AssumedWattsPerCPU * 1000, Origin: fmt.Sprintf("assumed: %d W per logical CPU × %d CPUs (no TDP known for %q)", AssumedWattsPerCPU, ncpu, model)}
}

// ParseTDP reads operator configuration such as "cpu=225W,gpu=700W".
func ParseTDP(s string) (map[device.Class]TDP, error) {
	out := map[device.Class]TDP{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("TDP %q: want CLASS=WATTSW, e.g. cpu=225W", part)
		}
		c, err := device.ParseClass(k)
		if err != nil {
			return nil, fmt.Errorf("TDP %q: %w", part, err)
		}
		w, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), "W"), 64)
		if err != nil || w <= 0 || w > 1e6 {
			return nil, fmt.Errorf("TDP %q: %q is not a power in watts", part, v)
		}
		out[c] = TDP{MilliWatts: uint64(w*1000 + 0.5), Origin: "configured: " + part}
	}
	return out, nil
}
